"""SIGHUP reload plans: one YAML file per scenario, diffed against base.yaml."""

from __future__ import annotations

import dataclasses
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from smqsup.config.model import Config, QueueConfig, load, loads
from smqsup.supervisor.plan import ReloadPlan, effective, generation, plan

RELOAD = Path(__file__).parent / "configs" / "reload"
ROOT = Path(__file__).parent.parent


def config(name: str) -> Config:
    return load(RELOAD / f"{name}.yaml")


def plan_from_base(name: str) -> ReloadPlan:
    return plan(config("base"), config(name))


def test_same_file_is_an_empty_plan() -> None:
    """Reloading the very same file changes nothing."""
    result = plan_from_base("base")
    assert result == ReloadPlan(unchanged=("orders", "emails"))
    assert result.empty
    assert result.describe() == "no changes"


def test_reformatted_file_is_an_empty_plan() -> None:
    """Other units, key order, flow style, spelled-out defaults and comments change nothing."""
    result = plan_from_base("same")
    assert result == ReloadPlan(unchanged=("emails", "orders"))
    assert result.empty


def test_scale_up() -> None:
    """A higher consumer count scales the queue in place without rolling it."""
    result = plan_from_base("scale_up")
    assert result == ReloadPlan(scaled={"orders": (2, 5)}, unchanged=("emails",))
    assert result.describe() == "scaled: orders 2->5"


def test_scale_down() -> None:
    """A lower consumer count scales the queue down in place without rolling it."""
    result = plan_from_base("scale_down")
    assert result == ReloadPlan(scaled={"orders": (2, 1)}, unchanged=("emails",))
    assert result.describe() == "scaled: orders 2->1"


def test_fixed_count_to_autoscaled_range() -> None:
    """A fixed count turned into a range scales the queue in place, shown as min..max, and rolls nothing."""
    result = plan_from_base("autoscaled")
    assert result == ReloadPlan(scaled={"orders": (2, 1)}, scaled_max={"orders": (None, 4)}, unchanged=("emails",))
    assert result.describe() == "scaled: orders 2->1..4"


def test_autoscaled_range_widened() -> None:
    """A new max with the same min is a scale (both sides shown as ranges), not a roll."""
    result = plan(config("autoscaled"), config("autoscaled_wider"))
    assert result == ReloadPlan(scaled={"orders": (1, 1)}, scaled_max={"orders": (4, 8)}, unchanged=("emails",))
    assert result.describe() == "scaled: orders 1..4->1..8"


def test_autoscaled_range_back_to_a_fixed_count() -> None:
    """A range turned back into a fixed count scales the queue in place."""
    result = plan(config("autoscaled"), config("base"))
    assert result == ReloadPlan(scaled={"orders": (1, 2)}, scaled_max={"orders": (4, None)}, unchanged=("emails",))
    assert result.describe() == "scaled: orders 1..4->2"


def test_scale_options_changed_roll_and_scale_nothing() -> None:
    """New scale_up_lag, scale_up_backlog, scale_down_after and scale_cooldown roll no consumer; the applied
    config holds them."""
    old, new = config("autoscaled"), config("autoscale_tuned")
    assert plan(old, new) == ReloadPlan(unchanged=("orders", "emails"))
    orders = effective(old, new).queues["orders"]
    assert (orders.scale_up_lag_s, orders.scale_up_backlog, orders.scale_down_after_s, orders.scale_cooldown_s) == (
        0.5, 100, 300.0, 2.0)


def test_autoscaled_range_changed_with_a_roll() -> None:
    """A range and a rolled option changed at once: the queue is both scaled and rolled."""
    old = config("autoscaled")
    text = (RELOAD / "autoscaled_wider.yaml").read_text(encoding="utf-8").replace("60s", "90s", 1)
    result = plan(old, loads(text, "new.yaml"))
    assert result == ReloadPlan(scaled={"orders": (1, 1)}, scaled_max={"orders": (4, 8)}, rolled=("orders",),
                                unchanged=("emails",))
    assert result.describe() == "scaled: orders 1..4->1..8; rolled: orders"


def test_handler_changed_rolls_the_queue() -> None:
    """A new handler path rolls that queue's consumers and nothing else."""
    result = plan_from_base("handler_changed")
    assert result == ReloadPlan(rolled=("emails",), unchanged=("orders",))
    assert result.describe() == "rolled: emails"


def test_option_changed_rolls_the_queue() -> None:
    """A changed queue option (retry_delay) rolls that queue."""
    result = plan_from_base("option_changed")
    assert result == ReloadPlan(rolled=("orders",), unchanged=("emails",))


def test_dedup_ttl_changed_rolls_nothing() -> None:
    """A new dedup_ttl (read by producers only) rolls no consumer, and the applied config holds it."""
    old, new = config("base"), config("dedup_ttl_changed")
    assert plan(old, new) == ReloadPlan(unchanged=("orders", "emails"))
    applied = effective(old, new)
    assert (applied.queues["orders"].dedup_ttl_s, applied.queues["emails"].dedup_ttl_s) == (3600.0, 7 * 86400.0)


def test_added_queue() -> None:
    """A queue only in the new file is started."""
    result = plan_from_base("added_queue")
    assert result == ReloadPlan(added=("flaky",), unchanged=("orders", "emails"))
    assert result.describe() == "added: flaky"


def test_removed_queue() -> None:
    """A queue only in the old file is drained and stopped."""
    result = plan_from_base("removed_queue")
    assert result == ReloadPlan(removed=("emails",), unchanged=("orders",))
    assert result.describe() == "removed: emails"


def test_url_change_needs_a_restart() -> None:
    """A new redis.url is reported as restart-only, and the effective config keeps the old one."""
    old, new = config("base"), config("url_changed")
    result = plan(old, new)
    assert result == ReloadPlan(unchanged=("orders", "emails"), restart_required=("redis.url",))
    assert not result.empty
    assert result.describe() == "needs restart: redis.url"
    applied = effective(old, new)
    assert applied.redis.url == "redis://127.0.0.1:6399/0"
    assert applied == dataclasses.replace(new, redis=old.redis)


def test_heartbeat_change_rolls_every_queue() -> None:
    """A child-held top-level setting (heartbeat_interval) rolls every queue."""
    result = plan_from_base("heartbeat_changed")
    assert result == ReloadPlan(rolled=("orders", "emails"), global_changed=("heartbeat_interval",))
    assert result.describe() == "rolled: orders, emails; changed: heartbeat_interval"


def test_combined_scale_roll_and_add() -> None:
    """One queue scaled and rolled at once, another added, the third untouched."""
    result = plan_from_base("combined")
    assert result == ReloadPlan(
        added=("flaky",), scaled={"orders": (2, 4)}, rolled=("orders",), unchanged=("emails",)
    )
    assert result.describe() == "added: flaky; scaled: orders 2->4; rolled: orders"


def test_forward_settings_do_not_roll() -> None:
    """shutdown_timeout and preload apply to new children only: reported, nothing rolled."""
    old = config("base")
    new = dataclasses.replace(old, shutdown_timeout_s=60.0, preload=True)
    result = plan(old, new)
    assert result == ReloadPlan(
        unchanged=("orders", "emails"), global_changed=("shutdown_timeout", "preload")
    )


def test_max_message_size_rolls_every_queue() -> None:
    """A new max_message_size is held by every child, so every queue rolls."""
    old = config("base")
    result = plan(old, dataclasses.replace(old, max_message_size_bytes=2048))
    assert result.rolled == ("orders", "emails")
    assert result.global_changed == ("max_message_size",)


def test_every_restart_setting_is_reported_and_kept() -> None:
    """redis url, data_dir, appendfsync, wait_replicas, wait_timeout and namespace all need a restart and
    keep their old values."""
    old = config("base")
    text = (RELOAD / "base.yaml").read_text(encoding="utf-8").replace(
        "redis:\n", "redis:\n  data_dir: /srv/redis\n  appendfsync: always\n  wait_replicas: 1\n  wait_timeout: 2s\n"
    ).replace("namespace: smq", "namespace: other").replace("6399/0", "6399/2")
    new = loads(text, "new.yaml")
    result = plan(old, new)
    assert result.restart_required == ("redis.url", "redis.data_dir", "redis.appendfsync", "redis.wait_replicas",
                                       "redis.wait_timeout", "namespace")
    assert result.rolled == () and result.unchanged == ("orders", "emails")
    applied = effective(old, new)
    assert (applied.redis, applied.namespace) == (old.redis, old.namespace)
    assert applied.queues == new.queues and applied.path == new.path


def test_web_section_change() -> None:
    """Adding a web section is reported as a web change and rolls nothing."""
    old = config("base")
    text = (RELOAD / "base.yaml").read_text(encoding="utf-8") + "web:\n  listen: 127.0.0.1:8099\n"
    result = plan(old, loads(text, "new.yaml"))
    assert result == ReloadPlan(unchanged=("orders", "emails"), web_changed=True)
    assert result.describe() == "web: changed"


def test_describe_lists_every_part_in_order() -> None:
    """describe() joins every non-empty part with '; ' in a fixed order."""
    result = ReloadPlan(
        added=("a", "c"), removed=("b",), scaled={"orders": (2, 5), "jobs": (1, 2)}, scaled_max={"jobs": (4, 8)},
        rolled=("emails",), restart_required=("redis.url",), global_changed=("preload",), web_changed=True,
    )
    assert result.describe() == (
        "added: a, c; removed: b; scaled: orders 2->5, jobs 1..4->2..8; rolled: emails; "
        "changed: preload; web: changed; needs restart: redis.url"
    )


def test_generation_ignores_consumers_name_dedup_ttl_and_scaling() -> None:
    """A queue's generation is unaffected by its consumer count or range, its name, its dedup_ttl and the
    scale_* options."""
    queue = config("base").queues["orders"]
    assert generation(dataclasses.replace(queue, consumers=7)) == generation(queue)
    assert generation(dataclasses.replace(queue, consumers_max=9)) == generation(queue)
    assert generation(dataclasses.replace(queue, name="other")) == generation(queue)
    assert generation(dataclasses.replace(queue, dedup_ttl_s=60.0)) == generation(queue)
    scaling = {"scale_up_lag_s": 0.5, "scale_up_backlog": 3, "scale_down_after_s": 2.0, "scale_cooldown_s": 9.0}
    assert generation(dataclasses.replace(queue, **scaling)) == generation(queue)


def test_generation_covers_every_other_field() -> None:
    """Changing any queue field other than name, the consumers, dedup_ttl and scale_* changes the generation."""
    queue = QueueConfig(name="q", handler="examples.handlers:flaky")
    changed: dict[str, Any] = {
        "handler": "examples.handlers:send_email", "retry_threshold": 9, "retry_delay_s": 2.5,
        "retry_backoff": 3.0, "retry_delay_max_s": 10.0, "message_timeout_s": 4.0,
        "max_messages": 5, "max_memory_bytes": 1024, "concurrency": 8, "prefetch": 32, "rate_limit_per_s": 50.0, "rate_burst": 3, "partitions": 3,
        "result_ttl_s": 60, "events": True, "events_max": 50,
        "group_concurrency": 2, "group_rate_limit_per_s": 10.0, "group_rate_burst": 4,
        "hooks": ("examples.hooks:Audit",), "tracing": True,
    }
    covered = {f.name for f in dataclasses.fields(QueueConfig)} - {
        "name", "consumers", "consumers_max", "dedup_ttl_s",
        "scale_up_lag_s", "scale_up_backlog", "scale_down_after_s", "scale_cooldown_s"}
    assert set(changed) == covered, "a new QueueConfig field needs a case here"
    for field_name, value in changed.items():
        assert generation(dataclasses.replace(queue, **{field_name: value})) != generation(queue), field_name


def test_generation_with_config_covers_child_held_settings() -> None:
    """With the config given, heartbeat and message-size settings enter the generation."""
    base = config("base")
    queue = base.queues["orders"]
    assert generation(queue, base) != generation(queue)
    slower = dataclasses.replace(base, heartbeat_timeout_s=20.0)
    assert generation(queue, slower) != generation(queue, base)
    later = dataclasses.replace(base, shutdown_timeout_s=99.0)
    assert generation(queue, later) == generation(queue, base)


def test_generation_equal_for_equal_values_of_other_types() -> None:
    """An int and the equal float (``5`` vs ``5s``) and unit rounding noise hash the same."""
    queue = QueueConfig(name="q", handler="m:f", retry_delay_s=66.0)
    assert generation(dataclasses.replace(queue, retry_delay_s=66)) == generation(queue)
    assert generation(dataclasses.replace(queue, retry_delay_s=1.1 * 60)) == generation(queue)


@pytest.mark.parametrize("seed", ["1", "2"])
def test_generation_is_stable_across_processes(seed: str) -> None:
    """The generation is the same in another interpreter with another hash seed."""
    code = (
        "from smqsup.config.model import load; from smqsup.supervisor.plan import generation; "
        f"c = load({str(RELOAD / 'base.yaml')!r}); "
        "print(generation(c.queues['orders']), generation(c.queues['orders'], c))"
    )
    env = {**os.environ, "PYTHONHASHSEED": seed}
    out = subprocess.run(
        [sys.executable, "-c", code], env=env, cwd=ROOT, capture_output=True, text=True, check=True
    ).stdout.split()
    base = config("base")
    assert out == [generation(base.queues["orders"]), generation(base.queues["orders"], base)]
    assert all(len(value) == 12 and int(value, 16) >= 0 for value in out)
