"""Handlers the tests run in real consumer processes.

Each records what it saw by appending one line to a file per process under
$SMQ_TEST_OUT, so a test can read what every process handled even after the
process was killed (lines are written with O_APPEND before returning).
"""

from __future__ import annotations

import asyncio
import json
import logging
import os
import time
from typing import Any


def _record(event: str, msg: Any, **extra: Any) -> None:
    out = os.environ["SMQ_TEST_OUT"]
    line = json.dumps({"event": event, "id": msg.id, "attempts": msg.attempts, "pid": os.getpid(),
                       "body": msg.body, "t": time.monotonic(), **extra}) + "\n"
    fd = os.open(os.path.join(out, f"{os.getpid()}.log"), os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
    try:
        os.write(fd, line.encode())
    finally:
        os.close(fd)


def record(msg: Any) -> None:
    """Ack every message, recording it."""
    _record("done", msg)


def slow(msg: Any) -> None:
    """Record the start, sleep body["sleep"] seconds (default 0), record the end."""
    _record("start", msg)
    time.sleep(float(msg.body.get("sleep", 0)) if isinstance(msg.body, dict) else 0)
    _record("done", msg)


def _pause_of(msg: Any) -> float:
    """body["sleep"] on the first delivery, body["then"] (default 0) on any later one."""
    body = msg.body if isinstance(msg.body, dict) else {}
    return float(body.get("sleep", 0) if msg.attempts == 0 else body.get("then", 0))


async def pause_async(msg: Any) -> None:
    """async def: record the start, await asyncio.sleep (``_pause_of``), record the end. A body
    ``{"block": S}`` blocks the event loop itself for S seconds on the first delivery (time.sleep)."""
    _record("start", msg)
    body = msg.body if isinstance(msg.body, dict) else {}
    if body.get("block") and msg.attempts == 0:
        time.sleep(float(body["block"]))
    await asyncio.sleep(_pause_of(msg))
    _record("done", msg)


def pause_thread(msg: Any) -> None:
    """The same as a plain def (a thread of a concurrent consumer): time.sleep instead."""
    _record("start", msg)
    time.sleep(_pause_of(msg))
    _record("done", msg)


def max_overlap(events: list[dict[str, Any]]) -> int:
    """Most messages between their "start" and "done" at one moment, over
    every process (their ``t`` is CLOCK_MONOTONIC, one clock per machine)."""
    edges = sorted((e["t"], 1 if e["event"] == "start" else -1) for e in events if e["event"] in ("start", "done"))
    most = now = 0
    for _, step in edges:
        now += step
        most = max(most, now)
    return most


def fail(msg: Any) -> None:
    """Always raise, recording each attempt."""
    _record("attempt", msg)
    raise ValueError(f"boom {msg.body!r}")


def read_events(out_dir: str) -> list[dict[str, Any]]:
    """Every event recorded under ``out_dir``, in no particular order.

    Only whole lines count: a line without its newline, or one that does not
    decode yet, is one a handler is writing right now (or was writing when it
    was killed), not an event yet. (An O_APPEND write is atomic against other
    writers, not against a reader: a read racing it can see the new bytes
    before they are all copied.) A skipped line is read again by the next
    call; a line that never decodes leaves its event missing, which fails the
    waiting test rather than passing it.

    Tests poll this every few ms while thousands of events come in: the
    lines of each file up to the first one skipped are decoded once and kept
    (``_DECODED``), and each call decodes only what follows them.
    """
    events = []
    for name in os.listdir(out_dir):
        if name.endswith(".log"):
            events += _events_in(os.path.join(out_dir, name))
    return events


#: Per file read: (device, inode, its first bytes, the length of its leading
#: whole lines that all decoded, their events). Files are only appended to.
_DECODED: dict[str, tuple[int, int, bytes, int, list[dict[str, Any]]]] = {}
_HEAD = 64
_UNDECODED = object()


def _events_in(path: str) -> list[dict[str, Any]]:
    """The events of one file, as read_events reads them (each a copy)."""
    with open(path, "rb") as f:
        st = os.fstat(f.fileno())
        head = f.read(_HEAD)
        dev, ino, seen_head, clean, kept = _DECODED.get(path, (0, 0, b"", 0, []))
        if (dev, ino) != (st.st_dev, st.st_ino) or st.st_size < clean or not head.startswith(seen_head):
            clean, kept = 0, []  # not the file read before, or not as it was: read it all
        f.seek(clean)
        rest = f.read()
    kept = list(kept)
    tail: list[dict[str, Any]] = []  # what decodes after a line skipped: decoded again next time
    skipped = False
    for raw in rest.splitlines(keepends=True):
        line = raw.decode(errors="replace")
        event: Any = _UNDECODED
        if line.endswith("\n") and line.strip():
            try:
                event = json.loads(line)
            except ValueError:
                pass
        blank = line.endswith("\n") and not line.strip()  # never an event
        if not skipped and (event is not _UNDECODED or blank):
            if event is not _UNDECODED:
                kept.append(event)
            clean += len(raw)
        else:
            skipped = True
            if event is not _UNDECODED:
                tail.append(event)
    _DECODED[path] = (st.st_dev, st.st_ino, head[:min(clean, _HEAD)], clean, kept)
    return [dict(e) if isinstance(e, dict) else e for e in kept] + tail


_LEAK: list[bytes] = []


def leak(msg: Any) -> None:
    """Keep body["mb"] MiB alive forever (touching every page), then ack."""
    _LEAK.append(b"x" * (int(msg.body["mb"]) << 20))
    _record("done", msg)


def crash(msg: Any) -> None:
    """Take the whole process down mid-message, as a segfaulting C extension would."""
    _record("start", msg)
    os._exit(70)


def talk(msg: Any) -> None:
    """Log one warning line and print one stdout line naming the message, then ack."""
    logging.getLogger(__name__).warning("handling %s", msg.id)
    print(f"stdout of the handler for {msg.id}", flush=True)
    _record("done", msg)


def spin(msg: Any) -> None:
    """Hold the CPU in pure Python for body["seconds"], then ack."""
    end = time.monotonic() + float(msg.body["seconds"])
    n = 0
    while time.monotonic() < end:
        n += 1
    _record("done", msg)


def exit0(msg: Any) -> None:
    """End the process with status 0 in the middle of the message."""
    _record("start", msg)
    os._exit(0)


def exit3(msg: Any) -> None:
    """A body "poison" ends the process with status 3 mid-message (the status a
    native library might use); any other body is recorded and acked."""
    if msg.body == "poison":
        _record("start", msg)
        os._exit(3)
    _record("done", msg)


def chaos(msg: Any) -> None:
    """Record every delivery; a body ``{"kind": ...}`` is poison: "raise"
    raises, "exit" ends the process mid-message (as a crashing C extension
    would), "hang" sleeps far past any message_timeout."""
    kind = msg.body.get("kind") if isinstance(msg.body, dict) else None
    _record("attempt" if kind else "done", msg)
    if kind == "raise":
        raise ValueError("poison")
    if kind == "exit":
        os._exit(139)
    if kind == "hang":
        time.sleep(3600)


def timed(msg: Any) -> None:
    """Ack every message, recording it with the wall clock (``wall``, unix s),
    to compare with due times on the Redis clock of the same host."""
    _record("done", msg, wall=time.time())


def reject(msg: Any) -> None:
    """Record each delivery, then raise Reject("bad")."""
    from smqsup import Reject

    _record("attempt", msg)
    raise Reject("bad")


def retry_always(msg: Any) -> None:
    """Record each delivery, then raise Retry(delay=0.5)."""
    from smqsup import Retry

    _record("attempt", msg)
    raise Retry(delay=0.5)


def retry_once(msg: Any) -> None:
    """Record each delivery; raise Retry(delay=0.2) on the first, ack the next."""
    from smqsup import Retry

    _record("attempt", msg)
    if msg.attempts == 0:
        raise Retry(delay=0.2)
    _record("done", msg)


def record_fire(msg: Any) -> None:
    """Ack a message a schedule fired, recording which schedule and slot it stands for."""
    headers = msg.headers if isinstance(msg.headers, dict) else {}
    _record("fire", msg, schedule=headers.get("smqsup-schedule"), fire_time=headers.get("smqsup-fire-time"),
            catch_up=headers.get("smqsup-catch-up") is True)


def leak_secrets(msg: Any) -> None:
    """Raise an exception whose text (and so traceback) holds a Redis url's password and the web token."""
    _record("attempt", msg)
    raise ConnectionError(f"cannot reach redis://app:{os.environ['LEAK_PASSWORD']}@db.internal:6379/0 "
                          f"(token {os.environ['LEAK_TOKEN']})")


def answer(msg: Any) -> Any:
    """Record the start; a first attempt of body {"hang": true} sleeps (to be
    killed); otherwise return what this attempt saw (the result)."""
    _record("start", msg)
    if msg.attempts == 0 and isinstance(msg.body, dict) and msg.body.get("hang"):
        time.sleep(60)
    return {"attempts": msg.attempts, "pid": os.getpid(), "body": msg.body}


def family(msg: Any) -> Any:
    """Record the message with its parents' results (``parents``: [queue, id,
    result] each) and failures; sleep body["sleep"] s if given; return
    body["i"] * 10 for a dict with "i", else the body."""
    _record("done", msg, parents=sorted([q, mid, r] for (q, mid), r in msg.parents.items()),
            failed=sorted(f"{q}/{mid}" for q, mid in msg.failed_parents))
    body = msg.body
    if isinstance(body, dict) and body.get("sleep"):
        time.sleep(body["sleep"])
    return body["i"] * 10 if isinstance(body, dict) and "i" in body else body


def grow(msg: Any) -> Any:
    """Record; a body below 100 adds two messages to its batch (100 more, and one)."""
    _record("done", msg)
    if isinstance(msg.body, int) and msg.body < 100:
        msg.batch.publish(msg.queue, msg.body * 100 + 100)
        msg.batch.publish_many(msg.queue, [msg.body * 100 + 101])


def step(msg: Any) -> Any:
    """A chain's step: its parent's result (0 for none) plus its body; a body of -1 fails for good (Reject)."""
    from smqsup import Reject

    _record("done", msg, parents=sorted([q, mid, r] for (q, mid), r in msg.parents.items()),
            failed=sorted(f"{q}/{mid}" for q, mid in msg.failed_parents))
    if msg.body == -1:
        raise Reject("minus one")
    return sum(msg.parents.values()) + msg.body


def loud(msg: Any) -> None:
    """Raise ValueError(body["e"]) and log it with its traceback and the whole body (one dict argument),
    as a handler's own ``except: log.exception(...)`` does; then let it fail the attempt."""
    _record("attempt", msg)
    try:
        raise ValueError(msg.body["e"])
    except ValueError:
        logging.getLogger(__name__).exception("handler failed on %s", msg.body)
        raise


def when_told(msg: Any) -> None:
    """Record the start, wait (at most 30 s) until the test creates the file ``go-ID`` in $SMQ_TEST_OUT,
    then raise when body["then"] is "raise", else return (a test decides when the handler ends)."""
    _record("start", msg)
    go = os.path.join(os.environ["SMQ_TEST_OUT"], f"go-{msg.id}")
    deadline = time.monotonic() + 30
    while not os.path.exists(go) and time.monotonic() < deadline:
        time.sleep(0.002)  # (the handler's wait: it must end within milliseconds of the file)
    if isinstance(msg.body, dict) and msg.body.get("then") == "raise":
        raise ValueError("failed after the cancel")
    _record("done", msg)
