"""A handler module that records, at import time, the pid of the process importing it."""

import os

from tests.support.handlers import record as handle

with open(os.path.join(os.environ["SMQ_TEST_OUT"], "imported-by.txt"), "a") as f:
    f.write(f"{os.getpid()}\n")

__all__ = ["handle"]
