"""One Alertmanager's HTTP endpoint: `POST <url>/api/v2/alerts` over a kept-alive connection (stdlib
`http.client`), with basic auth or a bearer token and TLS as Prometheus' `alertmanager_config` has
them. Secrets are read when a connection is made (a rotated file is picked up) and never logged:
`redacted(url)` is what logs, metrics and the status page name an Alertmanager by.
"""

from __future__ import annotations

import base64
import http.client
import ssl
from pathlib import Path
from urllib.parse import urlsplit

from worker.settings.alerting import AlertingSettings

ALERTS_PATH = "/api/v2/alerts"
# A response body is read for the log line of a refusal; the rest is not wanted.
_BODY_CHARS = 300


class PostError(Exception):
    """A request that did not reach Alertmanager or was refused; `retry` says whether sending the same
    alerts again can help (connection, timeout, 5xx, 429), `status` the HTTP status (None: no answer)."""

    def __init__(self, message: str, retry: bool, status: int | None = None) -> None:
        super().__init__(message)
        self.retry = retry
        self.status = status


def redacted(url: str) -> str:
    """scheme://host[:port][/prefix]: the settings refuse URLs with user info, so nothing secret is left."""
    parts = urlsplit(url)
    return f"{parts.scheme}://{parts.netloc}{parts.path}"


def tls_context(settings: AlertingSettings) -> ssl.SSLContext:
    context = ssl.create_default_context(cafile=settings.ca_file)
    if settings.cert_file is not None:
        context.load_cert_chain(settings.cert_file, settings.key_file)
    if settings.insecure_skip_verify:
        context.check_hostname = False
        context.verify_mode = ssl.CERT_NONE
    return context


def auth_header(settings: AlertingSettings) -> str | None:
    """The Authorization header's value, or None. Reads the secret files now."""
    if settings.username is not None:
        password = settings.password if settings.password_file is None else \
            Path(settings.password_file).read_text().strip()
        pair = f"{settings.username}:{password or ''}".encode()
        return "Basic " + base64.b64encode(pair).decode()
    token = settings.bearer_token if settings.bearer_token_file is None else \
        Path(settings.bearer_token_file).read_text().strip()
    return f"Bearer {token}" if token else None


class AlertmanagerClient:
    """POSTs alerts to one Alertmanager. Not thread-safe: one sender thread owns it."""

    def __init__(self, url: str, settings: AlertingSettings) -> None:
        parts = urlsplit(url)
        self.url = redacted(url)
        self.https = parts.scheme == "https"
        self.host, self.port = parts.hostname or "", parts.port
        self.path = parts.path.rstrip("/") + ALERTS_PATH
        self.settings = settings
        self._conn: http.client.HTTPConnection | None = None
        self._auth: str | None = None

    def post(self, body: bytes) -> None:
        """Send one JSON array of alerts; returns when Alertmanager accepted it (2xx), else PostError.
        Blocks up to the timeout."""
        try:
            conn = self._connection()
            headers = {"Content-Type": "application/json", "Accept": "application/json"}
            if self._auth is not None:
                headers["Authorization"] = self._auth
            conn.request("POST", self.path, body=body, headers=headers)
            response = conn.getresponse()
            text = response.read()[:_BODY_CHARS].decode("utf-8", "replace").strip()
        except (OSError, http.client.HTTPException) as exc:  # refused, reset, timeout, TLS, a broken reply
            self.close()
            raise PostError(f"{type(exc).__name__}: {exc}", retry=True) from None
        if 200 <= response.status < 300:
            return
        if response.will_close:
            self.close()
        retry = response.status >= 500 or response.status == 429
        raise PostError(f"HTTP {response.status}: {text}", retry=retry, status=response.status)

    def _connection(self) -> http.client.HTTPConnection:
        if self._conn is None:
            self._auth = auth_header(self.settings)
            timeout = self.settings.timeout_s
            self._conn = http.client.HTTPSConnection(self.host, self.port, timeout=timeout,
                                                     context=tls_context(self.settings)) \
                if self.https else http.client.HTTPConnection(self.host, self.port, timeout=timeout)
        return self._conn

    def close(self) -> None:
        if self._conn is not None:
            self._conn.close()
            self._conn = None
