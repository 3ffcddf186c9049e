"""What operators read: the queues, their messages, dead letters and
schedules as the CLI (cli/) and the web UI (web/) show them, read and changed
through store/. One implementation for both; views never import cli/ or web/.

- status.py: the statistics snapshot as aligned tables for people (``smqsup status``).
- browse.py: a queue's messages listed by state, and waiting ones removed by id.
- deadletters.py: dead letters chosen, shown, requeued and purged, whatever bytes they hold.
- schedule_table.py: the schedules as a table (``smqsup schedules``, and under ``smqsup status``).
- text.py: the text forms every view shares: a bounded cell, a local time, who paused what when.
"""
