"""Figures of the supervisor (DESIGN section 7), measured on the real ``smqsup -c FILE``.

    python tests/bench/supervisor.py [--starts 3] [--idle-s 10] [--trials 10]

1. start -> READY=1: from just before the ``smqsup -c`` subprocess is spawned
   to the READY=1 datagram on a NOTIFY_SOCKET this script binds, with 16
   children (4 queues x 4 consumers, no-op handler); ``--starts`` runs.
2. idle CPU: the last of those supervisors, left alone (2 s to settle, then
   ``--idle-s`` seconds): its own user+system CPU time (psutil cpu_times of
   its pid, before and after) over the wall time. Target < 2 % of a core.
3. memory: USS (psutil memory_full_info) and RSS of each of the 16 children,
   median and max. Target USS <= 15 MB per child.
4. SIGKILL recovery, ``--trials`` times, one consumer of a queue whose handler
   hangs on the first attempt: SIGKILL it mid-message, then time (a) until the
   message is seen with attempts 1 in pending or in the processing list of
   another consumer (Redis polled every 0.5 ms), and (b) until a replacement
   consumer's handler starts on it (the handler stamps CLOCK_MONOTONIC, the
   clock this script stamps the kill with). Targets: (a) < 1 s, (b) < 2 s.

A private redis-server (unix socket, appendfsync everysec) in a temp dir, and
each ``smqsup -c`` (in its own session, so a Ctrl-C reaches only this script),
are started here and stopped on exit, Ctrl-C or SIGTERM. The only other
processes signalled are the consumers killed in (4), each checked first to be
a child of the supervisor this script started.
"""

from __future__ import annotations

import argparse
import contextlib
import os
import shutil
import signal
import socket
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any, Optional

BENCH_DIR = Path(__file__).resolve().parent
sys.path.insert(0, str(BENCH_DIR))
import _common as common  # noqa: E402  (puts the repo root on sys.path too)
import psutil  # noqa: E402
import redis  # noqa: E402
import yaml  # noqa: E402

from smqsup import message  # noqa: E402
from smqsup.client.producer import Producer  # noqa: E402
from smqsup.keys import QueueKeys  # noqa: E402

NS = common.NAMESPACE
QUEUES, CONSUMERS = 4, 4
VICTIM = "victim"
TARGET_BACK_S, TARGET_REPLACED_S = 1.0, 2.0
TARGET_IDLE_CPU_PERCENT, TARGET_USS_MB = 2.0, 15.0
MB = 1 << 20


class Supervisor:
    """One ``smqsup -c FILE`` subprocess that this script started, its output in a log file."""

    def __init__(self, cfg: Path, log_path: Path, notify_path: Path, out_dir: Path) -> None:
        env = dict(os.environ)
        env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(BENCH_DIR), str(common.REPO_ROOT),
                                                           env.get("PYTHONPATH", "")]))
        env["NOTIFY_SOCKET"] = str(notify_path)
        env["SMQ_BENCH_OUT"] = str(out_dir)
        for name in ("WATCHDOG_USEC", "WATCHDOG_PID", "JOURNAL_STREAM"):
            env.pop(name, None)
        self.log_path = log_path
        self._log = open(log_path, "w")
        self.spawned_at = time.monotonic()
        self.proc = subprocess.Popen([sys.executable, "-m", "smqsup", "-c", str(cfg)], env=env,
                                     stdin=subprocess.DEVNULL, stdout=self._log, stderr=subprocess.STDOUT,
                                     start_new_session=True)

    @property
    def pid(self) -> int:
        return self.proc.pid

    def consumers(self) -> list[psutil.Process]:
        """Its live consumer processes (direct children titled 'smqsup: consumer')."""
        found = []
        try:
            kids = psutil.Process(self.pid).children()
        except psutil.NoSuchProcess:
            return []
        for k in kids:
            try:
                if k.status() != psutil.STATUS_ZOMBIE and "smqsup: consumer" in " ".join(k.cmdline()):
                    found.append(k)
            except psutil.NoSuchProcess:
                pass
        return found

    def check_alive(self) -> None:
        if self.proc.poll() is not None:
            raise RuntimeError(f"smqsup -c exited with status {self.proc.returncode}; see {self.log_path}")

    def stop(self, timeout_s: float = 30.0) -> None:
        """SIGTERM (graceful stop), SIGKILL if it lingers; its children follow it by PDEATHSIG."""
        if self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(timeout_s)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        self._log.close()


class Notify:
    """The NOTIFY_SOCKET this script binds in place of systemd's. Like systemd, it reads
    every datagram as it comes (a thread): an unread socket fills up, and then each
    notification blocks the supervisor's main loop for up to a second."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self.sock = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
        self.sock.bind(str(path))
        self.sock.settimeout(0.2)
        self._ready_at: list[float] = []  # time.monotonic() of each READY=1 received
        self._cond = threading.Condition()
        self._closed = False
        self._reader = threading.Thread(target=self._read, name="notify-reader", daemon=True)
        self._reader.start()

    def _read(self) -> None:
        while not self._closed:
            try:
                data = self.sock.recv(4096)
            except TimeoutError:
                continue
            except OSError:
                return
            if "READY=1" in data.decode().split("\n"):
                with self._cond:
                    self._ready_at.append(time.monotonic())
                    self._cond.notify_all()

    def mark(self) -> int:
        """How many READY=1 have arrived so far (pass it to ``wait_ready``)."""
        with self._cond:
            return len(self._ready_at)

    def wait_ready(self, sup: Supervisor, after: int, timeout_s: float = 60.0) -> float:
        """time.monotonic() at which the first READY=1 after mark ``after`` was received."""
        deadline = time.monotonic() + timeout_s
        with self._cond:
            while len(self._ready_at) <= after:
                left = deadline - time.monotonic()
                if left <= 0:
                    raise RuntimeError(f"no READY=1 within {timeout_s} s; see {sup.log_path}")
                self._cond.wait(min(0.2, left))
                sup.check_alive()
            return self._ready_at[after]

    def close(self) -> None:
        self._closed = True
        self._reader.join(1.0)
        self.sock.close()


def write_config(path: Path, url: str, queues: dict[str, dict[str, Any]]) -> Path:
    path.write_text(yaml.safe_dump({"redis": {"url": url}, "namespace": NS, "shutdown_timeout": "5s",
                                    "queues": queues}))
    return path


def start(cfg: Path, tmp: Path, notify: Notify, stack: contextlib.ExitStack, name: str) -> Supervisor:
    out = tmp / f"{name}-out"
    out.mkdir(exist_ok=True)
    sup = Supervisor(cfg, tmp / f"{name}.log", notify.path, out)
    stack.callback(sup.stop)
    return sup


def mb(n: float) -> str:
    return f"{n / MB:.1f} MB"


# --- 1-3: start time, idle CPU, memory ------------------------------------------------


def bench_fleet(url: str, tmp: Path, notify: Notify, args: argparse.Namespace) -> None:
    cfg = write_config(tmp / "fleet.yaml", url, {f"q{i}": {"handler": "_supervisor_handlers:noop",
                                                           "consumers": CONSUMERS} for i in range(1, QUEUES + 1)})
    n = QUEUES * CONSUMERS
    with contextlib.ExitStack() as stack:
        times = []
        for run in range(args.starts):
            mark = notify.mark()
            sup = start(cfg, tmp, notify, stack, f"fleet{run}")
            times.append(notify.wait_ready(sup, mark) - sup.spawned_at)
            if len(sup.consumers()) != n:
                raise RuntimeError(f"READY=1 with {len(sup.consumers())} consumers, not {n}")
            if run < args.starts - 1:
                sup.stop()
        print(f"start -> READY=1, {n} children ({QUEUES} queues x {CONSUMERS}): "
              f"{', '.join(f'{t:.2f}' for t in times)} s (median {statistics.median(times):.2f} s)", flush=True)

        time.sleep(2.0)  # settle: the last starts' samples and log lines are done
        parent = psutil.Process(sup.pid)
        kids = sup.consumers()
        before = parent.cpu_times()
        kids_before = {k.pid: k.cpu_times() for k in kids}
        t0 = time.monotonic()
        time.sleep(args.idle_s)
        wall = time.monotonic() - t0
        after = parent.cpu_times()
        kids_after = {k.pid: k.cpu_times() for k in sup.consumers()}
        sup.check_alive()
        if set(kids_after) != set(kids_before):
            print("  (warning: the set of consumers changed during the idle measurement)")
        own = (after.user - before.user + after.system - before.system) / wall * 100
        theirs = sum(kids_after[p].user - kids_before[p].user + kids_after[p].system - kids_before[p].system
                     for p in kids_after if p in kids_before) / wall * 100
        print(f"supervisor CPU at idle, {n} children, {wall:.1f} s: {own:.2f} % of a core "
              f"(target < {TARGET_IDLE_CPU_PERCENT:g} %: {'meets' if own < TARGET_IDLE_CPU_PERCENT else 'MISSES'}); "
              f"the {n} children together: {theirs:.2f} %", flush=True)

        uss, rss = [], []
        for k in sup.consumers():
            full = k.memory_full_info()
            uss.append(full.uss)
            rss.append(full.rss)
        mine = parent.memory_full_info()
        med, top = statistics.median(uss), max(uss)
        print(f"memory per child, no-op handler, {len(uss)} children: USS median {mb(med)}, max {mb(top)} "
              f"(target <= {TARGET_USS_MB:g} MB: {'meets' if top <= TARGET_USS_MB * MB else 'MISSES'}); "
              f"RSS median {mb(statistics.median(rss))}, max {mb(max(rss))}; "
              f"supervisor USS {mb(mine.uss)}, RSS {mb(mine.rss)}", flush=True)


# --- 4: SIGKILL recovery ----------------------------------------------------------------


def _starts(out: Path) -> list[tuple[int, int, str, int]]:
    """(monotonic ns, pid, message id, attempts) of every handler start so far."""
    try:
        text = (out / "starts").read_text()
    except FileNotFoundError:
        return []
    rows = []
    for line in text.splitlines():
        parts = line.split()
        if len(parts) == 4:
            rows.append((int(parts[0]), int(parts[1]), parts[2], int(parts[3])))
    return rows


def _wait_start(sup: Supervisor, out: Path, mid: str, attempts: int, not_pid: int = 0,
                timeout_s: float = 10.0) -> tuple[int, int]:
    """(ns, pid) of the first start of ``mid`` at ``attempts`` in a process other than ``not_pid``."""
    deadline = time.monotonic() + timeout_s
    while True:
        for ns, pid, m, a in _starts(out):
            if m == mid and a == attempts and pid != not_pid:
                return ns, pid
        sup.check_alive()
        if time.monotonic() >= deadline:
            raise RuntimeError(f"message {mid} not started (attempts {attempts}) within {timeout_s} s; "
                               f"see {sup.log_path}")
        time.sleep(0.001)


def _back(client: "redis.Redis[bytes]", keys: QueueKeys, mid: str, killed: int) -> bool:
    """Is ``mid`` with attempts >= 1 in pending, or in a processing list of a consumer other than ``killed``?"""
    pipe = client.pipeline(transaction=False)
    pipe.lrange(keys.pending, 0, -1)
    pipe.hkeys(keys.consumers)
    frames, cids = pipe.execute()
    others = [c.decode() for c in cids if c.decode().split(":")[-2] != str(killed)]
    if others:
        pipe = client.pipeline(transaction=False)
        for cid in others:
            pipe.lrange(keys.processing(cid), 0, -1)
        for listed in pipe.execute():
            frames.extend(listed)
    for f in frames:
        try:
            msg = message.decode(f)
        except Exception:  # noqa: BLE001 - a frame we cannot read is not the one we look for
            continue
        if msg.id == mid and msg.attempts >= 1:
            return True
    return False


def bench_kill(url: str, tmp: Path, notify: Notify, args: argparse.Namespace) -> None:
    cfg = write_config(tmp / "kill.yaml", url, {VICTIM: {"handler": "_supervisor_handlers:victim",
                                                         "retry_threshold": 3}})
    keys = QueueKeys(NS, VICTIM)
    client: "redis.Redis[bytes]" = redis.Redis.from_url(url)
    with contextlib.ExitStack() as stack:
        stack.callback(client.close)
        mark = notify.mark()
        sup = start(cfg, tmp, notify, stack, "kill")
        out = tmp / "kill-out"
        notify.wait_ready(sup, mark)
        producer = stack.enter_context(Producer(url, NS))
        back_ms, start_ms, upper = [], [], 0
        for trial in range(args.trials):
            mid = producer.publish(VICTIM, {"trial": trial})
            _, pid = _wait_start(sup, out, mid, 0)
            if psutil.Process(pid).ppid() != sup.pid:
                raise RuntimeError(f"pid {pid} is not a child of our supervisor {sup.pid}")
            killed_ns = time.monotonic_ns()
            os.kill(pid, signal.SIGKILL)
            deadline = time.monotonic() + 10
            while True:
                if _back(client, keys, mid, pid):
                    back_ns = time.monotonic_ns()
                    break
                again = [ns for ns, p, m, a in _starts(out) if m == mid and a >= 1 and p != pid]
                if again:  # handled before a poll saw it: its start bounds the time from above
                    back_ns, upper = again[0], upper + 1
                    break
                if time.monotonic() >= deadline:
                    raise RuntimeError(f"message {mid} not back within 10 s; see {sup.log_path}")
                time.sleep(0.0005)
            started_ns, new_pid = _wait_start(sup, out, mid, 1, not_pid=pid)
            back_ms.append((back_ns - killed_ns) / 1e6)
            start_ms.append((started_ns - killed_ns) / 1e6)
            print(f"  trial {trial + 1}: killed pid {pid}; message back after {back_ms[-1]:.1f} ms, "
                  f"replacement pid {new_pid} handler started after {start_ms[-1]:.1f} ms", flush=True)
        b_med, b_max, s_med, s_max = (statistics.median(back_ms), max(back_ms), statistics.median(start_ms),
                                      max(start_ms))
        print(f"SIGKILL mid-message, {args.trials} trials: message back (attempts 1) median {b_med:.1f} ms, "
              f"max {b_max:.1f} ms (target < {TARGET_BACK_S * 1000:g} ms: "
              f"{'meets' if b_max < TARGET_BACK_S * 1000 else 'MISSES'})"
              + (f" [{upper} trial(s) bounded by the handler start]" if upper else ""))
        print(f"SIGKILL mid-message, {args.trials} trials: replacement's handler starts median {s_med:.1f} ms, "
              f"max {s_max:.1f} ms (target < {TARGET_REPLACED_S * 1000:g} ms: "
              f"{'meets' if s_max < TARGET_REPLACED_S * 1000 else 'MISSES'})", flush=True)


@contextlib.contextmanager
def workdir() -> Iterator[Path]:
    """A temp dir for configs and logs: removed, unless a measurement failed (its logs are kept)."""
    tmp = Path(tempfile.mkdtemp(prefix="smqsupbench-"))
    try:
        yield tmp
    except Exception:
        print(f"failed: logs kept in {tmp}", file=sys.stderr)
        raise
    shutil.rmtree(tmp, ignore_errors=True)


def main(argv: Optional[list[str]] = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--starts", type=int, default=3, help="start -> READY=1 runs (default 3)")
    parser.add_argument("--idle-s", type=float, default=10.0, help="idle CPU window, seconds (default 10)")
    parser.add_argument("--trials", type=int, default=10, help="SIGKILL trials (default 10)")
    args = parser.parse_args(argv)
    print(f"machine: {common.machine()}, psutil {psutil.__version__}", flush=True)
    with common.bench_server() as server, workdir() as tmp:
        notify = Notify(tmp / "notify")
        try:
            with common.interruptible("the supervisor and redis-server"):
                bench_fleet(server.url, tmp, notify, args)
                bench_kill(server.url, tmp, notify, args)
        finally:
            notify.close()
    return 0


if __name__ == "__main__":
    sys.exit(main())
