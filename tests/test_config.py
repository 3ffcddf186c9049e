"""queues.yaml: good files load as coerced dataclasses, every bad one fails in one line."""

from __future__ import annotations

import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from smqsup import defaults
from smqsup.config import model as config
from smqsup.config import names, scalars
from smqsup.errors import ConfigError, HandlerImportError
from smqsup.supervisor.protocol import MAX_SLOTS
from smqsup.worker import handlers
from tests.support import procs

CONFIGS = Path(__file__).parent / "configs"
BAD_FILES = sorted((CONFIGS / "bad").glob("*.yaml"))
ORDERS = "queues:\n  orders:\n    handler: myapp.handlers:process_order\n"


def loads(text: str) -> config.Config:
    return config.loads(textwrap.dedent(text), "queues.yaml")


def error_of(text: str) -> str:
    with pytest.raises(ConfigError) as caught:
        loads(text)
    message = str(caught.value)
    assert "\n" not in message
    return message


def expected_fragment(path: Path) -> str:
    first = path.read_text(encoding="utf-8").splitlines()[0]
    assert first.startswith("# expect: "), f"{path.name}: first line must be '# expect: ...'"
    return first.removeprefix("# expect: ")


# --- good files -----------------------------------------------------------------


@pytest.fixture
def good_env(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("SMQSUP_TEST_REDIS_URL", raising=False)
    monkeypatch.setenv("SMQSUP_TEST_EMAIL_CONSUMERS", "2")
    monkeypatch.setenv("SMQSUP_TEST_WEB_TOKEN", "s3cret")


@pytest.mark.usefixtures("good_env")
def test_good_file_loads_with_coerced_values() -> None:
    """Every key of good.yaml arrives typed: seconds, bytes, booleans, env values."""
    cfg = config.load(CONFIGS / "good.yaml")
    assert cfg.path == CONFIGS / "good.yaml"
    assert cfg.redis == config.RedisConfig(
        url="redis://127.0.0.1:1/0", data_dir=CONFIGS / "data", appendfsync="no"
    )
    assert not cfg.redis.embedded
    assert cfg.namespace == "shop.prod"
    assert cfg.max_message_size_bytes == 2 * 1024**2
    assert (cfg.heartbeat_interval_s, cfg.heartbeat_timeout_s) == (0.5, 5.0)
    assert cfg.shutdown_timeout_s == 60.0
    assert cfg.preload is True
    assert cfg.queues["orders"] == config.QueueConfig(
        name="orders", handler="myapp.handlers:process_order", consumers=4,
        retry_threshold=3, retry_delay_s=5.0, retry_backoff=2.0, retry_delay_max_s=3600.0,
        message_timeout_s=60.0, max_messages=10000, max_memory_bytes=512 * 1024**2,
        dedup_ttl_s=5400.0,
    )
    assert cfg.web == config.WebConfig(listen="0.0.0.0:8087", token="s3cret")


@pytest.mark.usefixtures("good_env")
def test_defaults_section_applies_where_a_queue_is_silent() -> None:
    """A queue takes the defaults: section, then the built-in defaults, for what it omits."""
    emails = config.load(CONFIGS / "good.yaml").queues["emails"]
    assert emails == config.QueueConfig(
        name="emails", handler="myapp.mail:Sender.send", consumers=2,
        retry_threshold=5, retry_delay_s=2.0, retry_backoff=2.0,
        retry_delay_max_s=defaults.RETRY_DELAY_MAX_S, message_timeout_s=1.5,
        max_messages=defaults.MAX_MESSAGES, max_memory_bytes=256 * 1024**2,
        dedup_ttl_s=7 * 86400.0,
    )


def test_relative_data_dir_resolves_against_the_config_directory(tmp_path: Path) -> None:
    """data_dir: data in /x/queues.yaml means /x/data, whatever the working directory."""
    (tmp_path / "queues.yaml").write_text("redis:\n  data_dir: state/redis\n" + ORDERS)
    cfg = config.load(tmp_path / "queues.yaml")
    assert cfg.redis.data_dir == tmp_path / "state" / "redis"
    assert cfg.redis.embedded


def test_minimal_file_gets_every_default() -> None:
    """A file with one queue and its handler is a whole config: the rest is defaults.py."""
    cfg = loads(ORDERS)
    assert cfg.redis == config.RedisConfig()
    assert cfg.namespace == defaults.NAMESPACE
    assert cfg.max_message_size_bytes == defaults.MAX_MESSAGE_SIZE_BYTES
    assert cfg.heartbeat_timeout_s == defaults.HEARTBEAT_TIMEOUT_S
    assert cfg.preload is False
    assert cfg.web is None
    assert cfg.queues == {
        "orders": config.QueueConfig(name="orders", handler="myapp.handlers:process_order")
    }
    assert cfg.queues["orders"].dedup_ttl_s == defaults.DEDUP_TTL_S == 24 * 3600.0


def test_load_does_not_import_handlers() -> None:
    """load() checks the handler's format only: a module that does not exist is fine."""
    assert loads(ORDERS).queues["orders"].handler == "myapp.handlers:process_order"


def test_empty_web_section_runs_the_web_ui_with_defaults() -> None:
    """web: with nothing under it enables the web UI on the loopback default."""
    assert loads(ORDERS + "web:\n").web == config.WebConfig(listen=defaults.WEB_LISTEN)


def test_ipv6_loopback_listen_needs_no_token() -> None:
    """[::1]:8087 is accepted and, being loopback, needs no token."""
    assert loads(ORDERS + "web:\n  listen: '[::1]:8087'\n").web == config.WebConfig("[::1]:8087")


def test_env_default_applies_when_unset_or_empty(monkeypatch: pytest.MonkeyPatch) -> None:
    """${VAR:-default} uses the default when VAR is unset or empty."""
    monkeypatch.delenv("SMQSUP_TEST_NS", raising=False)
    assert loads("namespace: ${SMQSUP_TEST_NS:-fallback}\n" + ORDERS).namespace == "fallback"
    monkeypatch.setenv("SMQSUP_TEST_NS", "")
    assert loads("namespace: ${SMQSUP_TEST_NS:-fallback}\n" + ORDERS).namespace == "fallback"
    monkeypatch.setenv("SMQSUP_TEST_NS", "set")
    assert loads("namespace: x.${SMQSUP_TEST_NS:-fallback}\n" + ORDERS).namespace == "x.set"


def test_env_values_may_spell_numbers_and_booleans(monkeypatch: pytest.MonkeyPatch) -> None:
    """A value from the environment is a string, yet fills an int, float or bool key."""
    monkeypatch.setenv("SMQSUP_TEST_N", "3")
    monkeypatch.setenv("SMQSUP_TEST_PRELOAD", "True")
    cfg = loads(
        "preload: ${SMQSUP_TEST_PRELOAD}\n" + ORDERS
        + "    consumers: ${SMQSUP_TEST_N}\n    retry_backoff: ${SMQSUP_TEST_N}\n"
    )
    assert cfg.preload is True
    assert (cfg.queues["orders"].consumers, cfg.queues["orders"].retry_backoff) == (3, 3.0)


def test_literal_string_never_counts_as_a_number() -> None:
    """consumers: "4" (quoted in the file) is refused: only env values are converted."""
    assert error_of(ORDERS + "    consumers: '4'\n").endswith(
        "queues.orders.consumers: expected a positive integer, got '4'"
    )


def test_double_dollar_is_a_literal_placeholder() -> None:
    """$${NAME} is kept as the text ${NAME}, not expanded."""
    cfg = loads(ORDERS + "web:\n  token: pa$${NOT_A_VAR}ss\n")
    assert cfg.web is not None and cfg.web.token == "pa${NOT_A_VAR}ss"


def test_empty_url_from_env_means_embedded(monkeypatch: pytest.MonkeyPatch) -> None:
    """url: ${REDIS_URL:-} with REDIS_URL unset selects the embedded server."""
    monkeypatch.delenv("SMQSUP_TEST_REDIS_URL", raising=False)
    assert loads("redis:\n  url: ${SMQSUP_TEST_REDIS_URL:-}\n" + ORDERS).redis.embedded


@pytest.mark.parametrize(
    "url", ["rediss://user:pw@redis.example:6380/2", "unix:///run/redis.sock?db=1",
            "sentinel://s1:26379,s2:26379/mymaster", "redis://[::1]:6379"],
)
def test_every_supported_url_scheme_loads(url: str) -> None:
    """redis://, rediss://, unix:// and sentinel:// urls are accepted as written."""
    assert loads(f"redis:\n  url: '{url}'\n" + ORDERS).redis.url == url


def test_yaml_one_point_one_booleans_stay_strings() -> None:
    """appendfsync: no is the string 'no' (YAML 1.2 booleans), not False."""
    assert loads("redis:\n  appendfsync: no\n" + ORDERS).redis.appendfsync == "no"


# --- autoscaling -------------------------------------------------------------------


def test_a_plain_consumer_count_is_not_autoscaled() -> None:
    """consumers: 3 is a fixed count: consumers_max stays None."""
    orders = loads(ORDERS + "    consumers: 3\n").queues["orders"]
    assert (orders.consumers, orders.consumers_max, orders.autoscaled, orders.consumers_most) == (3, None, False, 3)


def test_a_consumer_range_parses_per_queue() -> None:
    """consumers: {min: 2, max: 8} is the min in consumers and the max in consumers_max."""
    orders = loads(ORDERS + "    consumers: {min: 2, max: 8}\n").queues["orders"]
    assert (orders.consumers, orders.consumers_max, orders.autoscaled, orders.consumers_most) == (2, 8, True, 8)


def test_a_consumer_range_without_min_starts_at_one() -> None:
    """min is optional: consumers: {max: 4} is 1..4; min equal to max is allowed."""
    assert loads(ORDERS + "    consumers:\n      max: 4\n").queues["orders"].consumers == 1
    orders = loads(ORDERS + "    consumers: {min: 1000, max: 1000}\n").queues["orders"]
    assert (orders.consumers, orders.consumers_max) == (1000, 1000)


def test_a_consumer_range_in_defaults_applies_unless_a_queue_sets_its_own() -> None:
    """A range under defaults: autoscales every queue that is silent; a queue's plain count overrides it whole."""
    cfg = loads("defaults:\n  consumers: {min: 2, max: 6}\n" + ORDERS
                + "  emails:\n    handler: m:f\n    consumers: 3\n"
                + "  reports:\n    handler: m:f\n    consumers: {max: 9}\n")
    counts = {name: (q.consumers, q.consumers_max) for name, q in cfg.queues.items()}
    assert counts == {"orders": (2, 6), "emails": (3, None), "reports": (1, 9)}


def test_a_consumer_range_may_come_from_the_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    """min and max may be ${VAR}s, as a plain count may."""
    monkeypatch.setenv("SMQSUP_TEST_MAX", "12")
    orders = loads(ORDERS + "    consumers: {min: 3, max: '${SMQSUP_TEST_MAX}'}\n").queues["orders"]
    assert (orders.consumers, orders.consumers_max) == (3, 12)


def test_scale_options_have_their_defaults() -> None:
    """Without scale_* keys a queue gets defaults.py's SCALE_* values (5s, 20, 60s, 1s)."""
    orders = loads(ORDERS + "    consumers: {max: 4}\n").queues["orders"]
    assert (orders.scale_up_lag_s, orders.scale_up_backlog, orders.scale_down_after_s, orders.scale_cooldown_s) == (
        defaults.SCALE_UP_LAG_S, defaults.SCALE_UP_BACKLOG, defaults.SCALE_DOWN_AFTER_S, defaults.SCALE_COOLDOWN_S)
    assert (defaults.SCALE_UP_LAG_S, defaults.SCALE_UP_BACKLOG, defaults.SCALE_DOWN_AFTER_S,
            defaults.SCALE_COOLDOWN_S) == (5.0, 20, 60.0, 1.0)


def test_scale_options_parse_per_queue_and_in_defaults() -> None:
    """scale_* keys take durations with units, in defaults: and per queue, the queue's winning."""
    cfg = loads("defaults:\n  scale_up_lag: 2s\n  scale_cooldown: 500ms\n  scale_up_backlog: 50\n" + ORDERS
                + "    consumers: {min: 1, max: 8}\n    scale_up_lag: 1m\n    scale_down_after: 2m\n")
    orders = cfg.queues["orders"]
    assert (orders.scale_up_lag_s, orders.scale_up_backlog, orders.scale_down_after_s, orders.scale_cooldown_s) == (
        60.0, 50, 120.0, 0.5)


# --- bad files ---------------------------------------------------------------------


def test_there_are_at_least_twenty_bad_files() -> None:
    """The bad-file corpus covers at least twenty distinct faults."""
    assert len(BAD_FILES) >= 20


@pytest.mark.parametrize("bad", BAD_FILES, ids=lambda path: path.stem)
def test_bad_file_fails_in_one_line(bad: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Each bad file raises ConfigError: one line, file path first, then its key path."""
    monkeypatch.delenv("SMQSUP_TEST_UNDEFINED", raising=False)
    with pytest.raises(ConfigError) as caught:
        config.load(str(bad))
    message = str(caught.value)
    assert "\n" not in message
    assert message.startswith(f"{bad}: ")
    assert expected_fragment(bad) in message
    assert caught.value.exit_code == 2
    assert caught.value.path == str(bad)


def test_error_records_its_key_path() -> None:
    """ConfigError.key is the dotted key path the message names."""
    with pytest.raises(ConfigError) as caught:
        loads(ORDERS + "    consumers: four\n")
    assert (caught.value.path, caught.value.key) == ("queues.yaml", "queues.orders.consumers")


def test_unknown_key_far_from_any_lists_the_allowed_keys() -> None:
    """An unknown key with no close match lists what the section accepts."""
    assert error_of(ORDERS + "    zzz: 1\n").startswith(
        "queues.yaml: queues.orders.zzz: unknown key (expected one of: handler, consumers,"
    )


def test_url_password_is_not_shown_in_errors() -> None:
    """A bad url is echoed with its credentials masked."""
    message = error_of("redis:\n  url: 'http://admin:hunter2@db:6379'\n" + ORDERS)
    assert "hunter2" not in message and "http://***@db:6379" in message


def test_web_token_value_is_not_shown_in_errors() -> None:
    """A token of the wrong type is reported by type, never by value."""
    message = error_of(ORDERS + "web:\n  token: 987654321\n")
    assert message == "queues.yaml: web.token: expected a string, got a value of type int"


def test_long_values_are_shortened_in_errors() -> None:
    """A huge bad value does not flood the one-line error."""
    assert len(error_of(ORDERS + f"    consumers: {'x' * 500}\n")) < 160


def test_missing_file_is_one_line() -> None:
    """A config file that does not exist: path and 'no such file'."""
    with pytest.raises(ConfigError, match=r"^nowhere/queues\.yaml: no such file$"):
        config.load("nowhere/queues.yaml")


def test_directory_is_one_line(tmp_path: Path) -> None:
    """A directory given as the config file is refused in one line."""
    with pytest.raises(ConfigError, match="is a directory"):
        config.load(tmp_path)


def test_non_utf8_file_is_one_line(tmp_path: Path) -> None:
    """Bytes that are not UTF-8 are reported with their offset, not a traceback."""
    (tmp_path / "queues.yaml").write_bytes(b"namespace: caf\xe9\n")
    with pytest.raises(ConfigError, match=r"not UTF-8 text \(byte 0xe9 at offset 14\)"):
        config.load(tmp_path / "queues.yaml")



def test_deep_nesting_below_the_recursion_limit_is_refused_too() -> None:
    """Nesting is bounded by a fixed depth, not by where Python's stack happens to end."""
    message = error_of("x: " + "[" * 21 + "]" * 21 + "\n" + ORDERS)
    assert message == "queues.yaml: invalid YAML at line 1:23: nested deeper than 20 levels"


def test_a_normal_file_is_far_from_the_nesting_limit() -> None:
    """Anchors, merge keys and flow lists as a real queues.yaml uses them still load."""
    cfg = loads("""\
        defaults: &base {retry_delay: 1s, consumers: 2}
        queues:
          orders: {<<: *base, handler: 'm:f'}
          emails: {<<: [*base], handler: 'm:g', consumers: 3}
        """)
    assert (cfg.queues["orders"].consumers, cfg.queues["emails"].consumers) == (2, 3)


def test_merge_keys_cannot_multiply_a_small_file_into_millions_of_keys() -> None:
    """A mapping merged thousands of times (an alias bomb through '<<') is refused at once."""
    big = ", ".join(f"k{i}: {i}" for i in range(1000))
    text = f"x: &a {{{big}}}\ny: {{<<: [{', '.join(['*a'] * 5000)}]}}\n" + ORDERS
    assert "mapping entries once merge keys (<<) are expanded" in error_of(text)


def test_a_chain_of_merges_is_refused_before_it_grows_quadratically() -> None:
    """Each mapping merging the previous one copies all its keys: bounded, not a million copies."""
    chain = "".join(f"a{i}: &a{i} {{<<: *a{i - 1}, k{i}: 1}}\n" for i in range(1, 1500))
    assert "mapping entries once merge keys (<<) are expanded" in error_of("a0: &a0 {k0: 1}\n" + chain)


def test_merges_deferred_through_a_list_cannot_recurse_without_bound() -> None:
    """Merge sources built inside a list are flattened late, one inside the other: bounded."""
    items = "".join(f"  - &a{i} {{<<: *a{i - 1}, k{i}: 1}}\n" for i in range(1, 3000))
    text = "l:\n  - &a0 {k0: 1}\n" + items + "x: {<<: *a2999}\n"
    assert "merge keys (<<) chained more than 20 deep" in error_of(text)


def test_too_many_yaml_nodes_are_refused() -> None:
    """A list of 100,000 items is not a queues.yaml: refused before it is all parsed."""
    assert "more than 25000 YAML nodes" in error_of("x: [" + ",".join(["1"] * 100_000) + "]\n")


@pytest.mark.parametrize(
    ("value", "problem"),
    [("2001-02-30", "invalid timestamp '2001-02-30': day is out of range for month"),
     ("!!int foo", "invalid int 'foo': invalid literal for int() with base 10: 'foo'"),
     ("!!float foo", "invalid float 'foo': could not convert string to float: 'foo'"),
     ("!!bool foo", "invalid bool 'foo'"),
     ("!!timestamp foo", "invalid timestamp 'foo'"),
     ("9" * 5000, "invalid int '99999999"),
     ("0x_", "invalid int '0x_'")],
)
def test_scalars_yaml_cannot_build_are_one_line_errors(value: str, problem: str) -> None:
    """A tagged or implicit scalar PyYAML fails to build is a YAML error with its line and column."""
    message = error_of(ORDERS + f"    consumers: {value}\n")
    assert message.startswith("queues.yaml: invalid YAML at line 4:16: ") and problem in message
    assert len(message) < 300


def test_a_lone_surrogate_from_the_environment_is_refused(monkeypatch: pytest.MonkeyPatch) -> None:
    """An environment value that was not UTF-8 (surrogate-escaped bytes) is not a string we can use."""
    monkeypatch.setenv("SMQSUP_TEST_TOKEN", "abc\udcff")
    assert error_of(ORDERS + "web:\n  token: ${SMQSUP_TEST_TOKEN}\n") == (
        "queues.yaml: web.token: not UTF-8 text (it holds a lone surrogate), got 'abc\\udcff'")


@pytest.mark.parametrize(
    "text",
    [ORDERS + '    "\\e[2J\\e[31mred\\u2028x": 1\n',
     ORDERS + '    "\\ud800": 1\n',
     ORDERS + '    "\\u202eevil\\U0010ffff": 1\n',
     ORDERS + "    consumers: \"\\x1b]0;title\\x07\\x85\"\n",
     "namespace: !!binary aGVsbG8=\n" + ORDERS,
     "queues:\n  ? " + "q" * 5000 + "\n  : {handler: 'm:f'}\n"],
)
def test_errors_are_short_printable_lines(text: str) -> None:
    """Control characters, line separators and lone surrogates in keys or values never reach the error raw."""
    message = error_of(text)
    assert message.isprintable() and len(message) < 400
    message.encode("utf-8")


def test_error_names_a_file_path_escaped(tmp_path: Path) -> None:
    """Even the file name given on the command line is shown as one printable line."""
    with pytest.raises(ConfigError) as caught:
        config.load(tmp_path / "a\x1b[2Jb\u2028.yaml")
    assert str(caught.value).isprintable() and "\\x1b[2Jb\\u2028.yaml: no such file" in str(caught.value)


def test_a_file_over_256_kib_is_refused_unread(tmp_path: Path) -> None:
    """A huge file is one line at once: a SIGHUP never parses megabytes of YAML."""
    path = tmp_path / "queues.yaml"
    path.write_text(ORDERS + "#" * 256 * 1024 + "\n")
    with pytest.raises(ConfigError) as caught:
        config.load(path)
    assert str(caught.value) == f"{path}: larger than 256KiB (a queues.yaml is a few kilobytes)"
    path.write_text(ORDERS + "#" * (256 * 1024 - len(ORDERS) - 1) + "\n")
    assert config.load(path).queues["orders"].handler == "myapp.handlers:process_order"


def test_the_largest_config_the_bounds_allow_fits_the_file_and_node_limits() -> None:
    """1,024 queues with every option spelled out load: the YAML limits only stop what no one writes."""
    options = ("    handler: myapp.handlers:process_order\n    consumers: 1\n    retry_threshold: 1000000\n"
               "    retry_delay: 10m\n    retry_backoff: 2.5\n    retry_delay_max: 1h\n"
               "    message_timeout: 90s\n    max_messages: 1000000\n    max_memory: 512MB\n")
    text = "queues:\n" + "".join(f"  queue-number-{i:04d}:\n{options}" for i in range(1024))
    assert len(text.encode()) <= 256 * 1024
    assert len(loads(text).queues) == 1024


def test_text_over_256_kib_is_refused() -> None:
    """loads() bounds its text as load() bounds the file."""
    assert error_of(ORDERS + "#" * 256 * 1024) == (
        "queues.yaml: larger than 256KiB (a queues.yaml is a few kilobytes)")

# --- scalar validators -------------------------------------------------------------


@pytest.mark.parametrize(
    ("value", "seconds"),
    [(5, 5.0), (1.5, 1.5), (0, 0.0), ("500ms", 0.5), ("5s", 5.0), ("2m", 120.0),
     ("1h", 3600.0), ("1.5s", 1.5), ("1d", 86400.0), ("10 S", 10.0), ("30", 30.0)],
)
def test_parse_duration_accepts(value: object, seconds: float) -> None:
    """Durations are numbers of seconds or strings with ms, s, m, h or d."""
    assert scalars.parse_duration(value, "k", "f.yaml") == pytest.approx(seconds)


@pytest.mark.parametrize(
    "value", [True, False, -1, -0.5, "-5s", "5 parsecs", "", "s", "1h30m", float("nan"), None, [1]],
)
def test_parse_duration_rejects(value: object) -> None:
    """Booleans, negatives and garbage are not durations."""
    with pytest.raises(ConfigError, match=r"^f\.yaml: a\.b: .*, got "):
        scalars.parse_duration(value, "a.b", "f.yaml")


@pytest.mark.parametrize(
    ("value", "size"),
    [(0, 0), (4096, 4096), ("100B", 100), ("64KB", 64 * 1024), ("1MiB", 1024**2),
     ("512MB", 512 * 1024**2), ("1GB", 1024**3), ("2g", 2 * 1024**3), ("1.5KB", 1536),
     ("10k", 10240), ("100", 100)],
)
def test_parse_size_accepts_binary_units(value: object, size: int) -> None:
    """K, KB and KiB all mean 1024 bytes; M* 1024**2; G* 1024**3."""
    assert scalars.parse_size(value, "k", "f.yaml") == size


@pytest.mark.parametrize("value", [True, -1, "-1KB", 1.5, "lots", "5 PB", "MB", None])
def test_parse_size_rejects(value: object) -> None:
    """Booleans, negatives, floats of bytes and unknown units are not sizes."""
    with pytest.raises(ConfigError, match=r"^f\.yaml: a\.b: .*, got "):
        scalars.parse_size(value, "a.b", "f.yaml")



@pytest.mark.parametrize(
    ("option", "value", "attribute", "coerced"),
    [("consumers", "1000", "consumers", 1000),
     ("retry_threshold", "1000000", "retry_threshold", 1_000_000),
     ("max_messages", "1000000000", "max_messages", 10**9),
     ("retry_backoff", "100", "retry_backoff", 100.0),
     ("retry_delay", "365d", "retry_delay_s", 365 * 86400.0),
     ("message_timeout", "365d", "message_timeout_s", 365 * 86400.0),
     ("max_memory", "1TB", "max_memory_bytes", 1024**4),
     ("dedup_ttl", "3650d", "dedup_ttl_s", 3650 * 86400.0),
     ("dedup_ttl", "1ms", "dedup_ttl_s", 0.001),
     ("concurrency", "1000", "concurrency", 1000),
     ("rate_limit", "1000000/s", "rate_limit_per_s", 1e6),
     ("rate_limit", "1/h", "rate_limit_per_s", 1 / 3600),
     ("rate_burst", "100000", "rate_burst", 100_000),
     ("concurrency", "1", "concurrency", 1),
     ("prefetch", "1000", "prefetch", 1000),
     ("prefetch", "1", "prefetch", 1),
     ("result_ttl", "99999999", "result_ttl_s", 99_999_999),
     ("result_ttl", "0", "result_ttl_s", 0),
     ("result_ttl", "1ms", "result_ttl_s", 1),
     ("events_max", "1000000", "events_max", 1_000_000),
     ("events_max", "1", "events_max", 1),
     ("events", "true", "events", True),
     ("scale_up_lag", "100ms", "scale_up_lag_s", 0.1),
     ("scale_up_lag", "1h", "scale_up_lag_s", 3600.0),
     ("scale_up_backlog", "1", "scale_up_backlog", 1),
     ("scale_up_backlog", "1000000", "scale_up_backlog", 1_000_000),
     ("scale_down_after", "1s", "scale_down_after_s", 1.0),
     ("scale_down_after", "1d", "scale_down_after_s", 86400.0),
     ("scale_cooldown", "100ms", "scale_cooldown_s", 0.1),
     ("scale_cooldown", "10m", "scale_cooldown_s", 600.0),
     ("group_concurrency", "1", "group_concurrency", 1),
     ("group_concurrency", "1000000", "group_concurrency", 1_000_000),
     ("group_rate_limit", "1000000/s", "group_rate_limit_per_s", 1e6),
     ("group_rate_limit", "1/d", "group_rate_limit_per_s", 1 / 86400),
     ("group_rate_burst", "100000", "group_rate_burst", 100_000)],
)
def test_every_bound_is_inclusive(option: str, value: str, attribute: str, coerced: object) -> None:
    """The largest value each bound allows loads as itself."""
    assert getattr(loads(ORDERS + f"    {option}: {value}\n").queues["orders"], attribute) == coerced


@pytest.mark.parametrize(
    ("option", "value", "problem"),
    [("consumers", "1001", "must be at most 1000 (consumers per queue), got 1001"),
     ("retry_threshold", "1000001", "must be at most 1000000, got 1000001"),
     ("max_messages", "1000000001", "must be at most 1000000000, got 1000000001"),
     ("retry_backoff", "100.5", "must be at most 100, got 100.5"),
     ("retry_delay", "8761h", "a duration must be at most 365d, got '8761h'"),
     ("max_memory", "1025GB", "a size must be at most 1TB, got '1025GB'"),
     ("dedup_ttl", "87601h", "a duration must be at most 3650d, got '87601h'"),
     ("dedup_ttl", "0s", "expected a duration greater than 0, got '0s'"),
     ("consumers", "0x" + "f" * 4000, "got an integer of 4817 digits"),
     ("retry_delay", "1" + "0" * 400, "a duration must be at most 365d, got an integer of 401 digits"),
     ("retry_backoff", "9" * 400, "must be at most 100, got an integer of 400 digits"),
     ("max_memory", "9" * 400 + "MB", "a size must be at most 1TB, got '99999"),
     ("concurrency", "1001", "must be at most 1000 (messages at once per consumer), got 1001"),
     ("concurrency", "0", "expected a positive integer, got 0"),
     ("concurrency", "-5", "expected a positive integer, got -5"),
     ("concurrency", "2.5", "expected a positive integer, got 2.5"),
     ("concurrency", ".nan", "expected a positive integer, got nan"),
     ("concurrency", "true", "expected a positive integer, got True"),
     ("concurrency", "'ten'", "expected a positive integer, got 'ten'"),
     ("concurrency", "[4]", "expected a positive integer, got a list"),
     ("concurrency", "9" * 400, "must be at most 1000 (messages at once per consumer), got an integer of 400 digits"),
     ("prefetch", "1001", "must be at most 1000 (frames one take holds), got 1001"),
     ("prefetch", "0", "expected a positive integer, got 0"),
     ("prefetch", "-1", "expected a positive integer, got -1"),
     ("prefetch", ".nan", "expected a positive integer, got nan"),
     ("prefetch", "true", "expected a positive integer, got True"),
     ("prefetch", "'32'", "expected a positive integer, got '32'"),
     ("prefetch", "{n: 3}", "expected a positive integer, got a mapping"),
     ("prefetch", "9" * 400, "must be at most 1000 (frames one take holds), got an integer of 400 digits"),
     ("rate_limit", "1000001/s", "a rate must be from 1 a day to 1000000/s, got '1000001/s'"),
     ("rate_limit", "50", "expected a rate like 100/s, 30/m, 1000/h or 1/d, got 50"),
     ("rate_limit", ".nan", "expected a rate like 100/s, 30/m, 1000/h or 1/d, got nan"),
     ("rate_limit", "'9" + "9" * 400 + "/s'", "expected a rate like 100/s, 30/m, 1000/h or 1/d, got '99999"),
     ("rate_burst", "0", "expected a positive integer, got 0"),
     ("rate_burst", "100001", "must be at most 100000 (starts back to back), got 100001"),
     ("result_ttl", "100000000", "expected a duration from 0 to 99999999s, got 100000000"),
     ("result_ttl", "-1s", "got '-1s'"),
     ("result_ttl", ".nan", "got nan"),
     ("result_ttl", "true", "got True"),
     ("result_ttl", "'forever'", "got 'forever'"),
     ("result_ttl", "9" * 400, "got an integer of 400 digits"),
     ("result_ttl", "[60]", "got a list"),
     ("events", "'yes'", "expected true or false, got 'yes'"),
     ("events", "1", "expected true or false, got 1"),
     ("events", "~", "a value is required, got None"),
     ("events_max", "1000001", "must be at most 1000000 (entries the event stream keeps), got 1000001"),
     ("events_max", "0", "expected a positive integer, got 0"),
     ("events_max", "-1", "expected a positive integer, got -1"),
     ("events_max", ".nan", "expected a positive integer, got nan"),
     ("events_max", "true", "expected a positive integer, got True"),
     ("events_max", "1.5", "expected a positive integer, got 1.5"),
     ("events_max", "9" * 400, "got an integer of 400 digits"),
     ("group_concurrency", "0", "expected a positive integer, got 0"),
     ("group_concurrency", "-1", "expected a positive integer, got -1"),
     ("group_concurrency", ".nan", "expected a positive integer, got nan"),
     ("group_concurrency", "true", "expected a positive integer, got True"),
     ("group_concurrency", "1000001", "must be at most 1000000 (messages of one group at once), got 1000001"),
     ("group_concurrency", "9" * 400, "got an integer of 400 digits"),
     ("group_concurrency", "'two'", "expected a positive integer, got 'two'"),
     ("group_rate_limit", "0/s", "a rate must be from 1 a day to 1000000/s, got '0/s'"),
     ("group_rate_limit", ".nan", "expected a rate like 100/s, 30/m, 1000/h or 1/d, got nan"),
     ("group_rate_limit", "-5/s", "expected a rate like 100/s, 30/m, 1000/h or 1/d, got '-5/s'"),
     ("group_rate_limit", "'9" + "9" * 400 + "/s'", "expected a rate like 100/s, 30/m, 1000/h or 1/d, got '99999"),
     ("group_rate_burst", "0", "expected a positive integer, got 0"),
     ("group_rate_burst", "100001", "must be at most 100000 (one group's starts back to back), got 100001")],
)
def test_every_number_is_bounded(option: str, value: str, problem: str) -> None:
    """One past a bound, or hundreds of digits, is one line naming the key, never an OverflowError."""
    message = error_of(ORDERS + f"    {option}: {value}\n")
    assert message.startswith(f"queues.yaml: queues.orders.{option}: ") and problem in message
    assert len(message) < 200


def test_heartbeat_settings_are_bounded() -> None:
    """heartbeat_interval is 10ms to 1h and heartbeat_timeout at most a day."""
    cfg = loads("heartbeat_interval: 10ms\nheartbeat_timeout: 1d\n" + ORDERS)
    assert (cfg.heartbeat_interval_s, cfg.heartbeat_timeout_s) == (0.01, 86400.0)
    assert error_of("heartbeat_interval: 5ms\n" + ORDERS) == (
        "queues.yaml: heartbeat_interval: expected a duration from 10ms to 1h, got '5ms'")
    assert error_of("heartbeat_timeout: 86401\n" + ORDERS) == (
        "queues.yaml: heartbeat_timeout: must be at most 1d, got 86401")


def test_consumers_in_all_queues_together_are_bounded() -> None:
    """1,024 consumers across queues load; one more is refused at the queues key."""
    queues = "".join(f"  q{i}:\n    handler: m:f\n    consumers: 256\n" for i in range(4))
    assert sum(q.consumers for q in loads("queues:\n" + queues).queues.values()) == 1024
    assert error_of("queues:\n" + queues + "  extra:\n    handler: m:f\n") == (
        "queues.yaml: queues: at most 1024 consumers in all queues together, got 1025")


def test_the_slot_table_holds_every_consumer_four_times_over() -> None:
    """A reload may overlap old, draining and new children: the slot table leaves room for it."""
    assert 4 * config.CONSUMERS_TOTAL_MAX <= MAX_SLOTS
    assert config.CONSUMERS_PER_QUEUE_MAX <= config.CONSUMERS_TOTAL_MAX


@pytest.mark.parametrize("value", ["inf", "-inf", "nan", "1e999", "9" * 500])
def test_non_finite_or_huge_numbers_from_the_environment_are_refused(
        value: str, monkeypatch: pytest.MonkeyPatch) -> None:
    """inf, NaN and 500-digit numbers from ${ENV} fail in one line for ints, floats and durations."""
    monkeypatch.setenv("SMQSUP_TEST_NUMBER", value)
    for option in ("consumers", "retry_backoff", "retry_delay", "max_memory"):
        message = error_of(ORDERS + f"    {option}: ${{SMQSUP_TEST_NUMBER}}\n")
        assert f"queues.orders.{option}: " in message and len(message) < 200

@pytest.mark.parametrize("name", ["orders", "a", "x" * 128, "Emails_v2.high-prio", "...", ".a", "a.", "-"])
def test_validate_queue_name_accepts(name: str) -> None:
    """Queue names are 1..128 of letters, digits, '_', '.' and '-'."""
    assert names.validate_queue_name(name) == name


@pytest.mark.parametrize(
    "name", ["", "x" * 129, "a{b}", "a}", "a:b", "a b", "tab\there", "é", 7, None, ".", ".."],
)
def test_validate_queue_name_rejects_without_a_location(name: object) -> None:
    """Without path and key the error is just the problem and the value, one line."""
    with pytest.raises(ConfigError) as caught:
        names.validate_queue_name(name)
    message = str(caught.value)
    assert "\n" not in message and not message.startswith(":")
    assert ", got " in message


def test_from_url_builds_a_queueless_config() -> None:
    """from_url gives a Config with only the url and namespace set."""
    cfg = config.from_url("redis://127.0.0.1:1/0", "other")
    assert cfg.redis.url == "redis://127.0.0.1:1/0"
    assert (cfg.namespace, cfg.queues, cfg.path) == ("other", {}, Path("<url>"))


@pytest.mark.parametrize("url", ["http://x:1", "localhost:6379", "", "redis://h:99999/0"])
def test_from_url_rejects_bad_urls(url: str) -> None:
    """from_url validates the url like redis.url in a file."""
    with pytest.raises(ConfigError, match=r"^redis\.url: "):
        config.from_url(url)


# --- import_handler ---------------------------------------------------------------


@pytest.fixture
def modules(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """A directory on sys.path holding throwaway handler modules."""
    monkeypatch.syspath_prepend(str(tmp_path))
    (tmp_path / "smqt_good.py").write_text(
        "def process(message):\n    return None\n\n"
        "class Sender:\n    @staticmethod\n    def send(message):\n        return None\n\n"
        "VALUE = 42\n"
    )
    (tmp_path / "smqt_boom.py").write_text("raise RuntimeError('no database\\nconfigured')\n")
    (tmp_path / "smqt_needs_dep.py").write_text("import smqt_no_such_dependency\n")
    (tmp_path / "smqt_ansi.py").write_text("raise RuntimeError('\\x1b[2Jscreen\\u2028gone')\n")
    return tmp_path


def handler_error(spec: str) -> str:
    with pytest.raises(HandlerImportError) as caught:
        handlers.import_handler(spec, path="queues.yaml", key="queues.orders.handler")
    message = str(caught.value)
    assert "\n" not in message
    assert message.startswith("queues.yaml: queues.orders.handler: ")
    assert message.endswith(f", got {spec!r}")
    assert caught.value.exit_code == 2
    return message


@pytest.mark.usefixtures("modules")
def test_import_handler_returns_the_function() -> None:
    """'module:function' and 'module:Class.attr' give the callables they name."""
    assert handlers.import_handler("smqt_good:process").__name__ == "process"
    assert handlers.import_handler("smqt_good:Sender.send").__name__ == "send"


def test_import_handler_rejects_a_spec_without_colon() -> None:
    """A dotted path without ':' is a format error, before any import."""
    assert "expected 'module:function' (no ':' found)" in handler_error("smqt_good.process")


def test_import_handler_names_the_missing_module() -> None:
    """A module that does not exist is named, with Python's own words."""
    assert "cannot import module 'smqt_absent' (ModuleNotFoundError: No module named " \
        "'smqt_absent')" in handler_error("smqt_absent:process")


def test_a_handler_not_found_names_the_directory_it_was_looked_for_in_and_the_fix(tmp_path: Path) -> None:
    """Started from another directory than the project's, smqsup check says where it looked and what to do."""
    project = tmp_path / "project"
    (project / "myapp").mkdir(parents=True)
    (project / "myapp" / "__init__.py").write_text("")
    (project / "myapp" / "handlers.py").write_text("def process(message):\n    return None\n")
    cfg = procs.write_config(project / "queues.yaml", "redis://127.0.0.1:1/0", {"q": {"handler": "myapp.handlers:process"}})
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    done = subprocess.run([sys.executable, "-m", "smqsup", "check", "-c", str(cfg)], cwd=elsewhere,
                          env=procs.env(), capture_output=True, text=True, timeout=60)
    assert done.returncode == 2
    assert f"No module named 'myapp'); looked in {elsewhere} (the directory smqsup was started in) and " \
        "PYTHONPATH: run smqsup from your project's root, or add that root to PYTHONPATH" in done.stderr
    ok = subprocess.run([sys.executable, "-m", "smqsup", "check", "-c", str(cfg)], cwd=project,
                        env=procs.env(), capture_output=True, text=True, timeout=60)
    assert ok.returncode == 0, ok.stderr


@pytest.mark.usefixtures("modules")
def test_import_handler_names_the_missing_attribute() -> None:
    """A missing function is named, with a did-you-mean when one is close."""
    message = handler_error("smqt_good:proces")
    assert "module 'smqt_good' has no attribute 'proces' (did you mean 'process'?)" in message
    assert "'smqt_good:Sender' has no attribute 'sned'" in handler_error("smqt_good:Sender.sned")


@pytest.mark.usefixtures("modules")
def test_import_handler_refuses_what_is_not_callable() -> None:
    """An attribute that exists but cannot be called is refused with its type."""
    assert "not callable (it is of type int)" in handler_error("smqt_good:VALUE")


@pytest.mark.usefixtures("modules")
def test_import_handler_reports_a_module_raising_on_import() -> None:
    """A module that raises at import is reported with the exception type and text."""
    message = handler_error("smqt_boom:process")
    assert "module 'smqt_boom' raised on import (RuntimeError: no database configured)" in message


@pytest.mark.usefixtures("modules")
def test_import_handler_tells_a_missing_dependency_from_a_missing_module() -> None:
    """A module that exists but imports something absent is not 'cannot import module'."""
    message = handler_error("smqt_needs_dep:process")
    assert "module 'smqt_needs_dep' raised on import (ModuleNotFoundError: No module named " \
        "'smqt_no_such_dependency')" in message


@pytest.mark.usefixtures("modules")
def test_import_handler_escapes_what_the_module_raised() -> None:
    """An exception text with terminal sequences or line separators is shown escaped."""
    message = handler_error("smqt_ansi:process")
    assert message.isprintable() and "(RuntimeError: \\x1b[2Jscreen\\u2028gone)" in message
