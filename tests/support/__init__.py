"""What the tests share, apart from the tests themselves (tests/test_*.py):
helpers, the actors they start, and the modules their configs name.

- helpers.py: waiting on a condition with a deadline, the Redis clock, timing an event loop's gaps.
- procs.py: the real ``smqsup`` command in subprocesses (supervisors, their output, signals).
- inproc.py: a consumer and a collector in threads of the test process, for store-level seams.
- clients.py: the Producer's API on either client (the both_clients conformance suite).
- topology.py: real Redis topologies (a Redis Cluster, a Sentinel group) on free ports.
- webserver.py: the real ``smqsup web`` in a subprocess, and a tiny HTTP client.
- shared_web.py: one redis-server and one ``smqsup web`` shared by a module's tests.
- script_coverage.py: which Lua scripts ran on a Redis Cluster in a run.
- chaos.py: the chaos run shared by test_chaos.py and bench/chaos.py.
- failover_run.py, lagging_run.py: the failover and lagging-replica runs of test_failover.py.
- handlers.py, web_handlers.py, otel_handlers.py: handlers the tests run in real consumer processes.
- hook_mods.py: hooks the hook tests name in their configs.
- otel_setup.py, otel_producer.py: OpenTelemetry's SDK for the tracing tests, and a producer process.
- crash_at_import.py, exit_at_import.py, interrupt_at_import.py, import_probe.py, die_before_telling.py:
  handler modules that fail, exit or die at a chosen moment.
"""
