"""Which Lua scripts ran on a Redis Cluster in a test run: the evidence that
the cluster runs of the suite cover every script.

    SMQSUP_SCRIPT_COVERAGE=DIR python -m pytest -k cluster     # record
    python -m tests.support.script_coverage DIR                         # report; exit 1 if one never ran

With the variable set, after each test on a cluster (a test may flush the
script caches, as a restarted node would) the scripts its live nodes hold in
their script caches (SCRIPT EXISTS) are appended to a file under DIR. A
script is cached there only by running it (EVALSHA falls back to EVAL, which
runs it; smqsup never SCRIPT LOADs), so cached means it ran on a cluster node
at least once."""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path

from smqsup.store import scripts
from smqsup.store.scripts import schedule_calls
from tests.support.topology import ClusterTopology

#: SHA-1 -> script name, of every script smqsup sends.
NAMES = {s.sha: s.name for s in (*scripts.ALL, *schedule_calls.ALL)}
ENV = "SMQSUP_SCRIPT_COVERAGE"


def record(cluster: ClusterTopology) -> None:
    """Write the scripts ``cluster``'s live nodes hold, when ENV names a directory."""
    where = os.environ.get(ENV)
    if not where:
        return
    held: set[str] = set()
    for node in cluster.nodes:
        if node.running():
            found = cluster.client(node).script_exists(*NAMES)
            held |= {sha for sha, hit in zip(NAMES, found) if hit}
    Path(where).mkdir(parents=True, exist_ok=True)
    with open(Path(where) / f"cluster-{os.getpid()}.jsonl", "a") as out:  # one file per xdist worker
        out.write(json.dumps(sorted(held)) + "\n")


def report(where: Path) -> list[str]:
    """The scripts no recorded cluster ran, after printing the ones each did."""
    ran: set[str] = set()
    for f in where.glob("cluster-*.jsonl"):
        for line in f.read_text().splitlines():
            ran |= set(json.loads(line))
    for sha, name in sorted(NAMES.items(), key=lambda item: item[1]):
        print(f"{name:20} {'ran' if sha in ran else 'NEVER RAN'}")
    return [name for sha, name in NAMES.items() if sha not in ran]


if __name__ == "__main__":
    if len(sys.argv) != 2 or not Path(sys.argv[1]).is_dir():
        sys.exit(f"usage: python -m tests.support.script_coverage DIR (the directory {ENV} named); "
                 f"got {sys.argv[1:]!r:.200}")
    missing = report(Path(sys.argv[1]))
    print(f"{len(NAMES) - len(missing)} of {len(NAMES)} scripts ran on a cluster")
    sys.exit(1 if missing else 0)
