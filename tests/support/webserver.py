"""Running the real ``smqsup web`` in a subprocess for tests, and a tiny HTTP client."""

from __future__ import annotations

import http.client
import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any, Optional

from tests.support import procs
from tests.support.helpers import wait_for

_READY = "smqsup web: listening on http://"


class WebServer:
    """``smqsup web ARGS --listen 127.0.0.1:0``; ``address`` is the port it bound,
    read from the line it prints once listening. Its log goes to a file; its
    environment is ours without $SMQSUP_WEB_TOKEN, plus ``extra_env``."""

    def __init__(self, *args: str, log_dir: Path, timeout_s: float = 15,
                 extra_env: Optional[dict[str, str]] = None) -> None:
        self.log_path = log_dir / "web.txt"
        self._log = open(self.log_path, "w")
        env = procs.env()
        env.pop("SMQSUP_WEB_TOKEN", None)
        env.update(extra_env or {})
        self.proc = subprocess.Popen([sys.executable, "-m", "smqsup", "web", *args], env=env,
                                     stdout=subprocess.PIPE, stderr=self._log)
        assert self.proc.stdout is not None
        os.set_blocking(self.proc.stdout.fileno(), False)
        self._out = b""
        try:
            self.address = wait_for(self._bound, timeout_s, interval_s=0.02,
                                    message=f"smqsup web did not start: {self.log_path}")
        except BaseException:
            self.stop()
            raise
        self.url = f"http://{self.address}"

    def _bound(self) -> str:
        """The address once the ready line is out, else "" (wait_for tries again)."""
        assert self.proc.stdout is not None
        try:
            self._out += os.read(self.proc.stdout.fileno(), 4096)
        except BlockingIOError:
            pass
        for line in self._out.decode(errors="replace").splitlines():
            if line.startswith(_READY):
                return line[len(_READY):].rstrip("/")
        if self.proc.poll() is not None:
            raise AssertionError(f"smqsup web exited with {self.proc.returncode}: {self.log()}")
        return ""

    def log(self) -> str:
        return self.log_path.read_text()

    def request(self, method: str, path: str, body: Any = None, headers: Optional[dict[str, str]] = None,
                origin: bool = False) -> tuple[int, dict[str, str], bytes]:
        """One HTTP request: (status, lowercased headers, body). ``body`` is sent
        as JSON; ``origin`` adds the server's own Origin header."""
        hdrs = dict(headers or {})
        data = None
        if body is not None:
            data = json.dumps(body).encode()
            hdrs.setdefault("Content-Type", "application/json")
        if origin:
            hdrs["Origin"] = self.url
        conn = http.client.HTTPConnection(self.address, timeout=10)
        try:
            conn.request(method, path, body=data, headers=hdrs)
            resp = conn.getresponse()
            return resp.status, {k.lower(): v for k, v in resp.getheaders()}, resp.read()
        finally:
            conn.close()

    def json(self, path: str, **headers: str) -> Any:
        """GET ``path`` and decode the JSON of a 200 reply."""
        status, _, body = self.request("GET", path, headers=headers)
        assert status == 200, (status, body)
        return json.loads(body)

    def stop(self) -> int:
        code = procs.stop(self.proc)
        if self.proc.stdout is not None:
            self.proc.stdout.close()
        self._log.close()
        return code
