"""The worker's HTTP port: /metrics, /healthz, /readyz, and the status page (/status + its data).

One ThreadingHTTPServer on a daemon thread, bound to the configured address. Probes and Prometheus
need no token; the status page's data (/status.json) needs the bearer token when one is set (the
page itself is static and holds no data). Every response says nosniff and forbids framing; the
page's Content-Security-Policy allows scripts from this origin only.
"""

from __future__ import annotations

import hmac
import logging
import threading
from collections.abc import Callable
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import msgspec
from prometheus_client import CONTENT_TYPE_LATEST, generate_latest

from worker.ops import page

log = logging.getLogger(__name__)

_CSP = ("default-src 'none'; script-src 'self'; style-src 'self'; connect-src 'self'; img-src 'self'; "
        "base-uri 'none'; form-action 'self'; frame-ancestors 'none'")
_STATIC = {"/status": (page.HTML, "text/html; charset=utf-8"),
           "/status.js": (page.JS, "text/javascript; charset=utf-8"),
           "/status.css": (page.CSS, "text/css; charset=utf-8")}


class OpsServer:
    """Serves one worker's operations endpoints until `close()`."""

    def __init__(self, registry, *, health=None, status=None, token: str | None = None) -> None:
        self.registry = registry
        self.health = health
        self.status = status   # a StatusBoard, or None: no status page
        self.token = token
        self._server: ThreadingHTTPServer | None = None

    def start(self, port: int, addr: str) -> int:
        """Bind `addr:port` (0: any free port) and serve from a daemon thread; returns the port."""
        handler = type("Handler", (_Handler,), {"ops": self})
        self._server = ThreadingHTTPServer((addr, port), handler)
        self._server.daemon_threads = True
        threading.Thread(target=self._server.serve_forever, name="telesum-http", daemon=True).start()
        return self._server.server_address[1]

    def close(self) -> None:
        if self._server is not None:
            self._server.shutdown()
            self._server.server_close()
            self._server = None

    def authorized(self, header: str | None) -> bool:
        if not self.token:
            return True
        scheme, _, given = (header or "").partition(" ")
        return scheme.lower() == "bearer" and hmac.compare_digest(given.strip().encode(), self.token.encode())


class _Handler(BaseHTTPRequestHandler):
    ops: OpsServer
    server_version = "telesum"
    sys_version = ""

    def do_GET(self) -> None:  # noqa: N802 - http.server's name
        path = self.path.split("?", 1)[0]
        ops = self.ops
        if path == "/metrics":
            self._send(200, generate_latest(ops.registry), CONTENT_TYPE_LATEST)
        elif path in ("/healthz", "/readyz") and ops.health is not None:
            check: Callable = ops.health.liveness if path == "/healthz" else ops.health.readiness
            ok, body = check()
            self._send(200 if ok else 503, msgspec.json.encode(body), "application/json")
        elif path in _STATIC and ops.status is not None:
            body, ctype = _STATIC[path]
            self._send(200, body.encode(), ctype, csp=True)
        elif path == "/status.json" and ops.status is not None:
            if not ops.authorized(self.headers.get("Authorization")):
                self._send(401, b'{"error":"a bearer token is required"}', "application/json",
                           extra={"WWW-Authenticate": 'Bearer realm="telesum"'})
                return
            self._send(200, ops.status.snapshot_json(), "application/json")
        elif path == "/":
            self._send(200, b"telesum: /metrics /healthz /readyz" + (b" /status" if ops.status else b"") + b"\n",
                       "text/plain; charset=utf-8")
        else:
            self._send(404, b"not found\n", "text/plain; charset=utf-8")

    def _send(self, code: int, body: bytes, ctype: str, csp: bool = False, extra: dict | None = None) -> None:
        self.send_response(code)
        self.send_header("Content-Type", ctype)
        self.send_header("Content-Length", str(len(body)))
        self.send_header("Cache-Control", "no-store")
        self.send_header("X-Content-Type-Options", "nosniff")
        self.send_header("X-Frame-Options", "DENY")
        self.send_header("Referrer-Policy", "no-referrer")
        if csp:
            self.send_header("Content-Security-Policy", _CSP)
        for key, value in (extra or {}).items():
            self.send_header(key, value)
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, format: str, *args) -> None:  # noqa: A002 - http.server's signature
        log.debug("http %s %s", self.address_string(), format % args)
