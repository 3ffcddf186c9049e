"""The ``smqsup`` command: main.py parses the command line and dispatches to
the module of the command's family; each imports common.py (never main.py)
and reads or changes what the others wrote through views/, client/ and
store/. A command module imports at its top only what building its parser
needs; the config reader, psutil, redis-py, aiohttp and the supervisor are
imported inside the command that uses them, after the config's errors, so
that `smqsup --help` and a bad config's one-line error stay light (about
60 and 95 ms of CPU, where both took 220 to 250: tests/test_cli_startup.py
checks what they load).

- main.py: the top-level parser, the dispatch to each command, main() and its one-line errors.
- common.py: what the commands share: the parser class, add_command() and the shared arguments (-c FILE / --url / --namespace...), flag types, connect().
- run_cmd.py: ``run`` (the supervisor), ``check`` (validate without starting) and ``consume`` (one consumer).
- publish_cmd.py: ``publish``, its flags' parsers and the publish itself.
- queue_cmd.py: ``pause``, ``resume``, ``messages`` and ``remove``: an operator's commands on one queue.
- events_cmd.py: ``events``: a queue's lifecycle events, oldest first, as text or JSON lines; --follow for what comes next.
- schedules_cmd.py: ``schedules``: list them, or pause, resume or reset one.
- status_cmd.py: ``status``: the statistics snapshot, once or every few seconds.
- dlq_cmd.py: ``dlq``: list, requeue or purge dead letters.
- web_cmd.py: ``web``: the web UI in the foreground, and where its token comes from.
- roll_cmd.py: ``roll``: find this host's supervisors running a config, and ask them to roll its queues.
"""
