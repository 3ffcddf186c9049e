"""The supervisor, parent side and child side.

Parent: arbiter.py (the loop and the signals) ─▶ decide.py (pure decisions
over states.py's states and restart policy) ─▶ consumers.py (fork, stop,
reap), beats.py (heartbeats), reclaims.py (returning a dead child's
messages), resources.py (psutil samples), web_child.py (the web UI process),
plan.py (the SIGHUP diff), systemd.py (sd_notify).
Child: child.py, what runs after fork. protocol.py: what the two share (exit
statuses and the shared-memory slot). Parent code and child code never share
a module.
"""
