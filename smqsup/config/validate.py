"""The validators of queues.yaml's values, under one name: ``validate.X``
wherever a value is checked (config.model's table of keys, the Producer's
arguments, the commands' flags, the web's query arguments).

Each validator takes (value, key path, file path) and returns the value
coerced, or raises the one-line ConfigError that names the file, the key and
the bad value. They live by what they validate; this module only gathers them:

    problems.py    the error every validator raises (error, show, key_text, join_key)
    env.py         ${VAR} expansion and the storable-text check (expand_env, storable)
    scalars.py     counts, multipliers, booleans, choices, durations, sizes, rates
    names.py       queue names and namespaces, handler specs
    addresses.py   Redis urls, host:port, the web's listen address, loopback, token, data_dir
"""

from __future__ import annotations

from smqsup.config.addresses import data_dir, host_port, is_loopback, listen, parse_listen, redis_url, token
from smqsup.config.env import EnvStr, expand_env, storable
from smqsup.config.names import handler_spec, queue_or_namespace, validate_queue_name
from smqsup.config.problems import MISSING, Validator, error, join_key, key_text, show
from smqsup.config.scalars import (
    DURATION_MAX_S,
    LONG_DURATION_MAX_S,
    RATE_MAX_PER_S,
    RATE_MIN_PER_S,
    REDIS_STRING_MAX_BYTES,
    SIZE_MAX_BYTES,
    boolean,
    choice,
    heartbeat_interval,
    heartbeat_timeout,
    int_range,
    long_duration,
    message_size,
    multiplier,
    parse_duration,
    parse_size,
    positive_long_duration,
    rate_limit,
    wait_timeout,
)

__all__ = [
    "DURATION_MAX_S", "LONG_DURATION_MAX_S", "MISSING", "RATE_MAX_PER_S", "RATE_MIN_PER_S", "REDIS_STRING_MAX_BYTES",
    "SIZE_MAX_BYTES", "EnvStr", "Validator", "boolean", "choice", "data_dir", "error", "expand_env", "handler_spec",
    "heartbeat_interval", "heartbeat_timeout", "host_port", "int_range", "is_loopback", "join_key", "key_text",
    "listen", "long_duration", "message_size", "multiplier", "parse_duration", "parse_listen", "parse_size",
    "positive_long_duration", "queue_or_namespace", "rate_limit", "redis_url", "show", "storable", "token",
    "validate_queue_name", "wait_timeout",
]
