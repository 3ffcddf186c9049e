"""``smqsup check``: import every handler of a config in a throwaway process.

The importing happens in a child so that the caller (the supervisor parent,
or the CLI) never runs user code and is not changed by it. The check passes
only when the child says so after the last import: a module that ends the
process while it is imported (``os._exit(0)``) fails the check.
"""

from __future__ import annotations

import subprocess
import sys

from smqsup.config import Config, import_handler, load
from smqsup.errors import HandlerImportError, SmqsupError

#: What the checking child prints once every handler imported.
_COMPLETE = "smqsup-check: every handler imported"


def check_handlers(cfg: Config, timeout_s: float = 60.0) -> None:
    """Raise HandlerImportError (all failures, one line each) if any handler
    of ``cfg`` cannot be imported, judged in a fresh Python process."""
    try:
        proc = subprocess.run([sys.executable, "-m", "smqsup.handlers", str(cfg.path)],
                              capture_output=True, text=True, timeout=timeout_s)
    except subprocess.TimeoutExpired:
        raise HandlerImportError(f"{cfg.path}: importing the handlers took over {timeout_s:.0f} s") from None
    lines = [line for line in proc.stderr.splitlines() if line.strip().startswith(f"{cfg.path}:")]
    if proc.returncode != 0 and lines:
        raise HandlerImportError("\n".join(lines))
    if proc.returncode != 0 or _COMPLETE not in proc.stdout.splitlines():
        # Ended without finishing the imports: a handler module stopped the process.
        raise HandlerImportError(f"{cfg.path}: importing the handlers ended the checking process "
                                 f"({_ended(proc.returncode)}) before every handler was imported")


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
    if failed:
        return 2
    sys.stdout.flush()
    print(_COMPLETE, flush=True)
    return 0


def _ended(returncode: int) -> str:
    return f"killed by signal {-returncode}" if returncode < 0 else f"exit status {returncode}"


if __name__ == "__main__":
    sys.exit(_main(sys.argv[1]))
