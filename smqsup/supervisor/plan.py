"""The pure SIGHUP diff: what the arbiter must start, stop, scale and roll to go from one config to the next.

Nothing here does I/O or logs; the arbiter loads the new file, calls
``plan(old, new)``, logs ``describe()``, and applies ``effective(old, new)``.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
from dataclasses import dataclass
from typing import Optional

from smqsup.config.model import Config, QueueConfig

#: QueueConfig fields that are not part of a queue's generation: the name is
#: the queue's identity, a consumer count or range (and when an autoscaled
#: queue steps within it: the scale_* options, read by the supervisor only)
#: is applied by scaling in place, and dedup_ttl is read by producers only
#: (each reads the file when it starts), so no consumer is rolled for them.
_NOT_GENERATION = frozenset({
    "name", "consumers", "consumers_max", "dedup_ttl_s",
    "scale_up_lag_s", "scale_up_backlog", "scale_down_after_s", "scale_cooldown_s",
})

#: Config fields every child holds from its start, so a change rolls every
#: queue (Config field -> its name in queues.yaml and in the plan).
_CHILD_SETTINGS = {
    "max_message_size_bytes": "max_message_size",
    "heartbeat_interval_s": "heartbeat_interval",
    "heartbeat_timeout_s": "heartbeat_timeout",
    "stats": "stats",
}

#: Config fields that apply to children started from now on, without a roll.
_FORWARD_SETTINGS = {
    "shutdown_timeout_s": "shutdown_timeout",
    "preload": "preload",
}

#: Hex digits of a generation: 48 bits, ample for telling configs apart.
_GENERATION_CHARS = 12


def _canonical(value: object) -> object:
    """``value`` in a form whose JSON text is equal when the values are meant to be.

    Floats are rounded to 12 significant digits, so that unit conversion noise
    (``1.1m`` is 66.00000000000001 s, ``66s`` is 66.0) rolls nothing, and an
    integral float becomes an int: ``retry_delay: 5`` (int 5) and
    ``retry_delay: 5s`` (float 5.0) are the same setting.
    """
    if isinstance(value, float):
        value = float(f"{value:.12g}")
        return int(value) if value.is_integer() else value
    if isinstance(value, (bool, int, float, str)) or value is None:
        return value
    return str(value)


def generation(q: QueueConfig, config: Config | None = None) -> str:
    """A short stable hash of everything about a queue that its running consumers depend on.

    Covers every QueueConfig field except those of _NOT_GENERATION (``name``,
    the consumers and the scale_* options, the producers' ``dedup_ttl_s``):
    new fields are covered without a change here. With ``config`` it also covers
    the top-level settings a child holds from its start (max_message_size,
    heartbeat_interval, heartbeat_timeout), so that comparing the generation a
    child was started under with the current one tells whether it must be
    rolled. Stable across processes and Python versions (sha256 over
    canonical JSON, never ``hash()``).
    """
    state: dict[str, object] = {
        f.name: _canonical(getattr(q, f.name))
        for f in dataclasses.fields(q)
        if f.name not in _NOT_GENERATION
    }
    if config is not None:
        state.update({f"config.{name}": _canonical(getattr(config, name)) for name in _CHILD_SETTINGS})
    text = json.dumps(state, sort_keys=True, separators=(",", ":"))
    return hashlib.sha256(text.encode("utf-8")).hexdigest()[:_GENERATION_CHARS]


@dataclass(frozen=True)
class ReloadPlan:
    """What differs between a running config and a re-read one, as actions.

    Queue tuples follow the new file's queue order (``removed``: the old
    file's). A queue is in at most one of added, removed, unchanged; a queue
    in both files is ``unchanged`` exactly when it is neither scaled nor
    rolled, and it may be both scaled and rolled.
    """

    #: Queues in the new config only: start them.
    added: tuple[str, ...] = ()
    #: Queues in the old config only: drain and stop them.
    removed: tuple[str, ...] = ()
    #: Queue -> (old consumers, new consumers) where the count or the autoscaled
    #: range changed, rolled or not (of a range: its min).
    scaled: dict[str, tuple[int, int]] = dataclasses.field(default_factory=dict)
    #: Queue -> (old consumers_max, new consumers_max) for each scaled queue
    #: autoscaled before or after (None: a fixed count then); a queue with a
    #: fixed count in both files is left out, ``scaled`` says all about it.
    scaled_max: dict[str, tuple[Optional[int], Optional[int]]] = dataclasses.field(default_factory=dict)
    #: Queues whose generation changed: replace their consumers one at a time.
    rolled: tuple[str, ...] = ()
    #: Queues in both configs with nothing to do.
    unchanged: tuple[str, ...] = ()
    #: Changed settings only a restart applies; ``effective`` keeps their old values.
    restart_required: tuple[str, ...] = ()
    #: Changed top-level settings (queues.yaml names) that apply from now on;
    #: the child-held ones (max_message_size, heartbeat_*) also roll every queue.
    global_changed: tuple[str, ...] = ()
    #: The web section changed (added, removed or edited): restart the web child.
    web_changed: bool = False

    @property
    def empty(self) -> bool:
        """True when the two configs differ in nothing a plan reports (``restart_required`` included)."""
        return not (
            self.added or self.removed or self.scaled or self.rolled
            or self.restart_required or self.global_changed or self.web_changed
        )

    def describe(self) -> str:
        """One log line: ``added: a; removed: b; scaled: orders 2->5; rolled: emails; needs restart: redis.url``.

        An autoscaled range shows as min..max: ``scaled: orders 2->1..8, emails 1..4->1..8``. Parts
        with nothing in them are left out; ``no changes`` when the plan is empty.
        """
        scaled = ", ".join(f"{name} {self._consumers(name, 0)}->{self._consumers(name, 1)}" for name in self.scaled)
        parts = [
            ("added", ", ".join(self.added)),
            ("removed", ", ".join(self.removed)),
            ("scaled", scaled),
            ("rolled", ", ".join(self.rolled)),
            ("changed", ", ".join(self.global_changed)),
            ("web", "changed" if self.web_changed else ""),
            ("needs restart", ", ".join(self.restart_required)),
        ]
        text = "; ".join(f"{label}: {items}" for label, items in parts if items)
        return text or "no changes"

    def _consumers(self, name: str, side: int) -> str:
        """A scaled queue's consumers in the old (``side`` 0) or new (1) file: ``2``, or ``1..8`` when autoscaled."""
        least = self.scaled[name][side]
        most = self.scaled_max.get(name, (None, None))[side]
        return str(least) if most is None else f"{least}..{most}"


def _restart_required(old: Config, new: Config) -> tuple[str, ...]:
    """The settings only a restart applies that differ, in a fixed order."""
    pairs = {
        "redis.url": (old.redis.url, new.redis.url),
        "redis.data_dir": (old.redis.data_dir, new.redis.data_dir),
        "redis.appendfsync": (old.redis.appendfsync, new.redis.appendfsync),
        "redis.wait_replicas": (old.redis.wait_replicas, new.redis.wait_replicas),
        "redis.wait_timeout": (old.redis.wait_timeout_s, new.redis.wait_timeout_s),
        "namespace": (old.namespace, new.namespace),
    }
    return tuple(name for name, (before, after) in pairs.items() if before != after)


def _global_changed(old: Config, new: Config) -> tuple[str, ...]:
    settings = {**_CHILD_SETTINGS, **_FORWARD_SETTINGS}
    return tuple(
        label for attribute, label in settings.items()
        if getattr(old, attribute) != getattr(new, attribute)
    )


def _counts(q: QueueConfig) -> tuple[int, Optional[int]]:
    """What a scale compares: the consumer count (or min) and the autoscaled max (None: a fixed count)."""
    return (q.consumers, q.consumers_max)


def plan(old: Config, new: Config) -> ReloadPlan:
    """The actions that take a supervisor running ``old`` to ``effective(old, new)``.

    Pure: compares values only (never the file paths, never queue order).
    """
    kept = [name for name in new.queues if name in old.queues]
    scaled = {
        name: (old.queues[name].consumers, new.queues[name].consumers)
        for name in kept
        if _counts(old.queues[name]) != _counts(new.queues[name])
    }
    scaled_max = {
        name: (old.queues[name].consumers_max, new.queues[name].consumers_max)
        for name in scaled
        if old.queues[name].autoscaled or new.queues[name].autoscaled
    }
    rolled = tuple(
        name for name in kept
        if generation(old.queues[name], old) != generation(new.queues[name], new)
    )
    return ReloadPlan(
        added=tuple(name for name in new.queues if name not in old.queues),
        removed=tuple(name for name in old.queues if name not in new.queues),
        scaled=scaled,
        scaled_max=scaled_max,
        rolled=rolled,
        unchanged=tuple(name for name in kept if name not in scaled and name not in rolled),
        restart_required=_restart_required(old, new),
        global_changed=_global_changed(old, new),
        web_changed=old.web != new.web,
    )


def effective(old: Config, new: Config) -> Config:
    """The config to apply: ``new``, except that the restart-only settings keep their old values.

    Those are the whole ``redis`` section and ``namespace``: every field of
    them that differs is in ``plan(old, new).restart_required``.
    """
    return dataclasses.replace(new, redis=old.redis, namespace=old.namespace)
