"""A handler module whose import kills the process: a consumer that dies at start."""

import os
import time

with open(os.path.join(os.environ["SMQ_TEST_OUT"], "imports.log"), "a") as f:
    f.write(f"{time.monotonic()}\n")
os._exit(1)


def handle(msg: object) -> None:  # never reached
    pass
