"""``smqsup check``: import every handler of a config in a throwaway process.

The importing happens in a child so that the caller (the supervisor parent,
or the CLI) never runs user code and is not changed by it.
"""

from __future__ import annotations

import subprocess
import sys

from smqsup.config import Config, import_handler, load
from smqsup.errors import HandlerImportError, SmqsupError


def check_handlers(cfg: Config, timeout_s: float = 60.0) -> None:
    """Raise HandlerImportError (all failures, one line each) if any handler
    of ``cfg`` cannot be imported, judged in a fresh Python process."""
    try:
        proc = subprocess.run([sys.executable, "-m", "smqsup.handlers", str(cfg.path)],
                              capture_output=True, text=True, timeout=timeout_s)
    except subprocess.TimeoutExpired:
        raise HandlerImportError(f"{cfg.path}: importing the handlers took over {timeout_s:.0f} s") from None
    if proc.returncode != 0:
        lines = [line for line in proc.stderr.splitlines() if line.strip()]
        raise HandlerImportError("\n".join(lines) or f"{cfg.path}: handler check failed ({proc.returncode})")


def _main(path: str) -> int:
    try:
        cfg = load(path)
    except SmqsupError as exc:
        print(exc, file=sys.stderr)
        return 2
    failed = 0
    for name, q in cfg.queues.items():
        try:
            import_handler(q.handler, path=str(cfg.path), key=f"queues.{name}.handler")
        except SmqsupError as exc:
            print(exc, file=sys.stderr)
            failed += 1
    return 2 if failed else 0


if __name__ == "__main__":
    sys.exit(_main(sys.argv[1]))
