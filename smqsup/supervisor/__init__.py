"""The supervisor, parent side and child side.

    queues.yaml ─▶ arbiter ─▶ decide (pure) ─▶ consumers ─fork─▶ child ─▶ worker's engine
                      │  ◀── signals: SIGHUP ─▶ plan (pure diff), SIGCHLD ─▶ reap, SIGTERM ─▶ stop
                      └▶ beats, reclaims, resources, declarations, web_child, systemd,
                         rolls (SIGHUP, SIGUSR1), reports, scaling, queue_info

Parent code and child code never share a module:

- arbiter.py: the parent loop and its signals; dispatches to the parts below.
- states.py: each child's life as explicit states and the restart policy.
- decide.py: the pure decisions (start, kill, restart, back off) over states and the time.
- consumers.py: the consumer children of every queue: fork, stop, reap.
- deaths.py: what an unplanned death does: its log line, the restart policy's move.
- beats.py: consumer liveness, parent side: heartbeats written for the children.
- reclaims.py: a dead or stopped child's messages go back to its queue at once.
- resources.py: CPU and memory of the children, read with psutil.
- declarations.py: the schedules this supervisor's config declares, upserted and withdrawn.
- web_child.py: the web UI child process, when queues.yaml has a ``web:`` section.
- plan.py: the pure SIGHUP diff from one config to the next.
- rolls.py: code rolls: changed code, a roll begun, failed, ended, watched.
- codedir.py: where the handlers' code comes from: the working directory as named, re-resolved at each roll.
- reports.py: the children's reports (their handler's files), in a private directory held open.
- scaling.py: autoscaling (the look at each autoscaled queue's lag and backlog, one step at a time), SIGTTIN/SIGTTOU.
- queue_info.py: what this supervisor tells Redis of each queue (target, range, roll, last scale event).
- systemd.py: sd_notify (READY, RELOADING, STOPPING, STATUS, WATCHDOG) without libsystemd.
- child.py: what runs in a consumer process after the fork (child side).
- protocol.py: what parent and child share: exit statuses and the shared-memory slot.
"""
