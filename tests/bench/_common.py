"""Shared plumbing of the benchmark scripts in tests/bench (not a test module).

- ``bench_server()``: a private redis-server (a unix socket, or TCP loopback
  with SMQSUP_BENCH_TCP=1; appendfsync everysec) in a fresh temp dir, stopped
  and removed on exit, Ctrl-C or SIGTERM; ``transport()`` names which.
- ``Children``: the consumer processes a script forks; it only ever signals
  the processes it started (by their own Process object), never by name.
- small statistics helpers (median, percentiles) and Redis probes.
"""

from __future__ import annotations

import multiprocessing as mp
import os
import shutil
import signal
import socket
import statistics
import sys
import tempfile
import time
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import Any, Optional

REPO_ROOT = Path(__file__).resolve().parents[2]
if str(REPO_ROOT) not in sys.path:
    sys.path.insert(0, str(REPO_ROOT))

import redis  # noqa: E402

from smqsup.launch.process import RedisServer  # noqa: E402

#: Start method of every consumer process (each builds its own Broker after fork).
CTX = mp.get_context("fork")
NAMESPACE = "smq"


class Terminated(Exception):
    """Raised in the parent when it receives SIGTERM, so cleanup runs."""


def _on_sigterm(signum: int, frame: Any) -> None:
    raise Terminated()


@contextmanager
def interruptible(what: str) -> Iterator[None]:
    """A benchmark's run: Ctrl-C or SIGTERM (Terminated, once bench_server()
    is on) ends it with one line on stderr, "stopping ``what``", and the
    shell's status for the signal (SystemExit 130 or 143), the caller's
    cleanup running on the way out."""
    try:
        yield
    except KeyboardInterrupt:
        print(f"\ninterrupted: stopping {what}", file=sys.stderr)
        raise SystemExit(130) from None
    except Terminated:
        print(f"\nterminated: stopping {what}", file=sys.stderr)
        raise SystemExit(143) from None


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@contextmanager
def bench_server() -> Iterator[RedisServer]:
    """Start a private redis-server on a unix socket in a temp dir (with
    SMQSUP_BENCH_TCP=1: on a TCP loopback port, as users run it; its url is
    then redis://127.0.0.1:PORT/0); always stop it."""
    previous = signal.signal(signal.SIGTERM, _on_sigterm)
    tmp = Path(tempfile.mkdtemp(prefix="smqbench-"))
    port = _free_port() if os.environ.get("SMQSUP_BENCH_TCP") == "1" else None
    server = RedisServer(tmp / "redis", appendfsync="everysec", port=port)
    try:
        server.start()
        yield server
    finally:
        try:
            server.stop()
        finally:
            shutil.rmtree(tmp, ignore_errors=True)
            signal.signal(signal.SIGTERM, previous)


def child_signals(on_stop: Callable[[], None]) -> None:
    """In a consumer child: ignore Ctrl-C (the parent decides when we stop)
    and turn SIGTERM into a graceful stop request."""
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    signal.signal(signal.SIGTERM, lambda signum, frame: on_stop())


def run_consumer(url: str, queue: str, handler: Callable[[Any], Any], profile_path: Optional[str] = None,
                 concurrency: int = 1, wait_replicas: int = 0, **options: Any) -> Any:
    """In a forked child: run the smqsup consumer of ``queue`` that
    ``concurrency`` asks for (``Consumer``: the handler inline for 1, beside
    an event loop above; ``wait_replicas``: the broker's; ``options``: other
    QueueConfig fields, e.g. ``prefetch``; ``prefetch=1``, the default, is
    left out, so that these scripts also run on a commit before prefetch,
    for ABBA) until SIGTERM (cProfile'd into ``profile_path`` when given: the
    loop's thread only); return it once stopped."""
    import cProfile

    from smqsup.config.model import QueueConfig
    from smqsup.store.broker import Broker
    from smqsup.worker.consumer import Consumer

    if options.get("prefetch") == 1:
        del options["prefetch"]
    holder: dict[str, Consumer] = {}
    stop_early: list[int] = []
    child_signals(lambda: holder["c"].request_stop() if "c" in holder else stop_early.append(1))
    broker = Broker(url, NAMESPACE, wait_replicas=wait_replicas)
    qcfg = QueueConfig(name=queue, handler="bench:handler", concurrency=concurrency, **options)
    consumer = Consumer(broker, qcfg, handler)
    holder["c"] = consumer
    if stop_early:
        consumer.request_stop()
    if profile_path:
        prof = cProfile.Profile()
        prof.enable()
        consumer.run()
        prof.disable()
        prof.dump_stats(profile_path)
    else:
        consumer.run()
    broker.close()
    return consumer


class Children:
    """The processes this script forked. ``stop()`` sends SIGTERM to each of
    them (a graceful stop request), waits, and SIGKILLs only our own stragglers."""

    def __init__(self) -> None:
        self.procs: list[mp.process.BaseProcess] = []

    def start(self, target: Callable[..., None], *args: Any) -> mp.process.BaseProcess:
        proc = CTX.Process(target=target, args=args, daemon=True)
        proc.start()
        self.procs.append(proc)
        return proc

    def stop(self, client: "Optional[redis.Redis[bytes]]" = None, timeout_s: float = 5.0) -> None:
        """SIGTERM each of our children; with ``client``, also wake the ones
        blocked in BLMOVE (CLIENT UNBLOCK ... TIMEOUT: the fetch returns
        nothing, as if it had timed out) so they notice at once."""
        for proc in self.procs:
            if proc.is_alive():
                proc.terminate()  # SIGTERM to this pid only
        deadline = time.monotonic() + timeout_s
        while any(p.is_alive() for p in self.procs) and time.monotonic() < deadline:
            if client is not None:
                try:
                    unblock_all(client)
                except redis.RedisError:
                    client = None
            for proc in self.procs:
                proc.join(0.01)
        for proc in self.procs:
            if proc.is_alive():
                proc.kill()
                proc.join(1.0)
        self.procs = []

    def failed(self) -> list[str]:
        return [f"pid {p.pid} exit {p.exitcode}" for p in self.procs
                if p.exitcode not in (None, 0)]


def wait_ready(client: "redis.Redis[bytes]", consumers_key: str, n: int, timeout_s: float = 20.0,
               children: Optional[Children] = None) -> None:
    """Wait until n consumers are registered in ``consumers_key`` AND n clients
    are blocked (in BLMOVE), i.e. every consumer waits on the empty queue."""
    deadline = time.monotonic() + timeout_s
    while True:
        if client.hlen(consumers_key) >= n and client.info("clients")["blocked_clients"] >= n:
            return
        if children is not None and children.failed():
            raise RuntimeError(f"a consumer process died during startup: {children.failed()}")
        if time.monotonic() > deadline:
            raise RuntimeError(f"consumers not ready after {timeout_s} s")
        time.sleep(0.002)


def unblock_all(client: "redis.Redis[bytes]") -> None:
    """Wake every client blocked in a BLMOVE on this (private) server."""
    for info in client.client_list():
        if info.get("cmd") == "blmove" or "b" in info.get("flags", ""):
            client.client_unblock(int(info["id"]), error=False)


def peak_rss_bytes() -> int:
    """This process's peak resident set size so far (getrusage ru_maxrss; a
    forked child's figure includes the pages it shares with its parent)."""
    import resource

    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024  # KiB on Linux


def command_calls(client: "redis.Redis[bytes]") -> dict[str, int]:
    """Calls per command since the server started (INFO commandstats)."""
    stats = client.info("commandstats")
    return {name.split("_", 1)[1]: int(v["calls"]) for name, v in stats.items()}


def calls_delta(before: dict[str, int], after: dict[str, int]) -> dict[str, int]:
    out = {k: after.get(k, 0) - before.get(k, 0) for k in after}
    return {k: v for k, v in out.items() if v}


def median(values: Sequence[float]) -> float:
    return statistics.median(values)


def percentile(sorted_values: Sequence[float], p: float) -> float:
    """Nearest-rank percentile of already sorted values (p in 0..100)."""
    if not sorted_values:
        return float("nan")
    k = max(0, min(len(sorted_values) - 1, int(round(p / 100.0 * len(sorted_values) + 0.5)) - 1))
    return sorted_values[k]


def sleep_until(deadline: float) -> None:
    """Sleep until time.perf_counter() reaches ``deadline`` (no drift accumulates)."""
    while True:
        left = deadline - time.perf_counter()
        if left <= 0:
            return
        time.sleep(left)


def machine() -> str:
    import platform

    return (f"{os.cpu_count()} CPUs, Python {platform.python_version()}, "
            f"redis-py {redis.__version__}, hiredis {'yes' if _has_hiredis() else 'NO'}")


def _has_hiredis() -> bool:
    try:
        import hiredis  # noqa: F401
    except ImportError:
        return False
    return True


def transport(server: RedisServer) -> str:
    """How the benchmark reaches its server, for its header line."""
    return "unix socket" if server.port is None else "TCP loopback"
