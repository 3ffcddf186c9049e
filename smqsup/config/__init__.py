"""queues.yaml read, validated completely and frozen before anything starts:
yamlfile.py reads the file within bounds, model.py (queue.py for each queue) builds the frozen
dataclasses, each value passing a validator (scalars.X, names.X,
addresses.X: each takes the value, its key path and the file path) that
returns it coerced or raises a one-line ConfigError naming file, key and value.

- model.py: the config as frozen dataclasses (Config, RedisConfig, WebConfig; QueueConfig re-exported) and load().
- queue.py: a queue's options, consumers as a count or an autoscaled range, the defaults: section, QueueConfig.
- mappings.py: a section read as a mapping: known keys only, values env-expanded, each validated or defaulted.
- yamlfile.py: reading a queues.yaml within bounds (a regular file, size, depth, nodes).
- schedule.py: the ``schedules:`` section, a schedule's stored definition, and when its slots come due.
- problems.py: the one-line error every validator raises, with the value and key shown short.
- env.py: ${VAR} expansion and the refusal of text no file, log or Redis can hold.
- scalars.py: counts, multipliers, booleans, choices, durations, sizes and rates, with their bounds.
- names.py: queue names, namespaces and handler specs.
- addresses.py: Redis urls, host:port, the web's listen address and loopback rule, token, data_dir.
"""
