"""What an unplanned death of a consumer does, parent side: its log line,
and the move of its queue's restart policy (states.py RestartPolicy)."""

from __future__ import annotations

import logging
import os
import signal

from smqsup.supervisor.decide import Death
from smqsup.supervisor.states import Child, RestartPolicy, State

log = logging.getLogger("smqsup.supervisor.consumers")  # the lines operators know, under their old name


def restart_policy(policy: RestartPolicy, c: Child, verdict: Death, now: float) -> None:
    """What an unplanned death does to the queue's restart policy."""
    if verdict is Death.CANNOT_RUN:
        policy.give_up("handler cannot be imported")
        log.error("queue %s: FATAL: %s; other queues keep running (fix it and send SIGHUP)", c.queue, policy.fatal)
    elif verdict is Death.AT_START:
        delay = policy.died_at_start(now)
        log.warning("queue %s: consumer died at start (%d in a row); next start in %.1fs",
                    c.queue, policy.failures, delay)
        if policy.state is State.FATAL and policy.failures == policy.limit:
            log.error("queue %s: FATAL: %s; other queues keep running (fix it and send SIGHUP)",
                      c.queue, policy.fatal)
    elif verdict is Death.WORKING:
        policy.died_working(now)


def log_death(c: Child, status: int, cause: str, verdict: Death) -> None:
    """The log line of an unplanned death, its level by its cause."""
    if verdict is Death.CLEAN:
        log.info("queue %s: consumer #%d (pid %d) exited (max_messages reached or stopped); replacing it",
                 c.queue, c.index, c.pid)
    elif os.WIFSIGNALED(status) and os.WTERMSIG(status) == signal.SIGKILL:
        log.error("queue %s: consumer #%d (pid %d) %s (out of memory? see dmesg); its message is back "
                  "in pending", c.queue, c.index, c.pid, cause)
    else:
        log.error("queue %s: consumer #%d (pid %d) %s", c.queue, c.index, c.pid, cause)
