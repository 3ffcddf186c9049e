"""smqsup.launch: redis-server processes smqsup starts itself, apart from
talking to queues (smqsup.store). The embedded default a config without a
url runs, and the private servers tests and benchmarks start on a socket
or a free port.

    embedded.ensure_server(config) ─▶ process.RedisServer ─▶ discovery (binary, socket, ping)

- discovery.py: where a private redis-server is (its binary, a config's data dir, the socket that serves a
  data dir) and whether one answers there; free_port() for tests and benchmarks.
- process.py: RedisServer, one private redis-server process: started, watched, stopped.
- embedded.py: the embedded server of a config: found, started, adopted when its owner died.
"""
