"""A tiny HTTP server that records what it is sent (an Alertmanager stand-in for the sender's tests, and
the webhook receiver of a real Alertmanager), and a real Alertmanager started on a free loopback port."""

from __future__ import annotations

import json
import os
import shutil
import socket
import subprocess
import threading
import time
import urllib.error
import urllib.request
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
VERSION = "v0.35.0"


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


class Recorder:
    """Records every POST (path, headers, JSON body, monotonic time); answers `status` (settable). Stops at
    close(). Thread-safe."""

    def __init__(self, status: int = 200, delay_s: float = 0.0, port: int = 0) -> None:
        self.status = status
        self.delay_s = delay_s
        self.posts: list[dict] = []
        self._lock = threading.Lock()
        recorder = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def do_POST(self):  # noqa: N802 - the stdlib's name
                body = self.rfile.read(int(self.headers.get("Content-Length", 0)))
                if recorder.delay_s:
                    time.sleep(recorder.delay_s)
                with recorder._lock:
                    recorder.posts.append({"path": self.path, "headers": dict(self.headers),
                                           "body": json.loads(body or b"null"), "at": time.monotonic(),
                                           "wall": time.time()})
                    status = recorder.status
                self.send_response(status)
                self.send_header("Content-Length", "0")
                self.end_headers()

            def log_message(self, *args):
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", port), Handler)
        self.server.daemon_threads = True
        self.url = f"http://127.0.0.1:{self.server.server_port}"
        self._thread = threading.Thread(target=self.server.serve_forever, daemon=True)
        self._thread.start()

    def snapshot(self) -> list[dict]:
        with self._lock:
            return list(self.posts)

    def alerts(self) -> list[dict]:
        """Every alert posted (a request to /api/v2/alerts carries a list)."""
        return [a for p in self.snapshot() if isinstance(p["body"], list) for a in p["body"]]

    def wait(self, until, timeout_s: float = 10.0):
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            if until(self):
                return True
            time.sleep(0.02)
        return until(self)

    def close(self) -> None:
        self.server.shutdown()
        self.server.server_close()


def alertmanager_binary() -> Path | None:
    """The cached build (scripts/alertmanager.sh build), or None."""
    cache = Path(os.environ.get("TELESUM_CACHE", Path.home() / ".cache" / "telesum"))
    path = cache / f"alertmanager-{VERSION}" / "alertmanager"
    return path if path.exists() else None


def build_alertmanager() -> Path:
    """Builds it unless cached (minutes, once): the tests need a real one."""
    if alertmanager_binary() is None and shutil.which("go"):
        subprocess.run([str(ROOT / "scripts" / "alertmanager.sh"), "build"], check=True, stdout=subprocess.DEVNULL)
    path = alertmanager_binary()
    if path is None:
        raise RuntimeError("no Alertmanager: Go is missing and none is cached (scripts/alertmanager.sh build)")
    return path


CONFIG = """\
route:
  receiver: webhook
  group_by: [incident_id]
  group_wait: {group_wait}
  group_interval: {group_interval}
  repeat_interval: 4h
receivers:
  - name: webhook
    webhook_configs:
      - url: {webhook}
        send_resolved: true
        max_alerts: 0
"""


class Alertmanager:
    """A real Alertmanager on a free loopback port, its webhook receiver a Recorder. stop()/start() keep
    its port and its data folder (silences and the notification log survive, alerts do not)."""

    def __init__(self, folder: Path, receiver: Recorder, group_wait: str = "100ms",
                 group_interval: str = "500ms") -> None:
        self.binary = build_alertmanager()
        self.folder = folder
        folder.mkdir(parents=True, exist_ok=True)
        (folder / "alertmanager.yml").write_text(CONFIG.format(webhook=receiver.url + "/hook", group_wait=group_wait,
                                                               group_interval=group_interval))
        self.port, self.cluster_port = free_port(), free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        self.process: subprocess.Popen | None = None

    def start(self, timeout_s: float = 60.0) -> None:  # a few seconds, but a busy 2-core machine is slow
        log = open(self.folder / "alertmanager.log", "ab")
        self.process = subprocess.Popen(
            [str(self.binary), f"--config.file={self.folder / 'alertmanager.yml'}",
             f"--storage.path={self.folder / 'data'}", f"--web.listen-address=127.0.0.1:{self.port}",
             "--cluster.listen-address=", "--log.level=warn"],
            stdout=log, stderr=subprocess.STDOUT)
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            if self.process.poll() is not None:
                raise RuntimeError(f"alertmanager exited: {(self.folder / 'alertmanager.log').read_text()[-2000:]}")
            try:
                with urllib.request.urlopen(self.url + "/-/ready", timeout=1) as response:
                    if response.status == 200:
                        return
            except OSError:
                time.sleep(0.05)
        raise RuntimeError(f"alertmanager did not become ready in {timeout_s:.0f} s: "
                           f"{(self.folder / 'alertmanager.log').read_text()[-2000:]}")

    def stop(self) -> None:
        if self.process is not None and self.process.poll() is None:
            self.process.terminate()
            self.process.wait(10)
        self.process = None

    def api(self, path: str, body=None, method: str | None = None):
        data = json.dumps(body).encode() if body is not None else None
        request = urllib.request.Request(self.url + "/api/v2/" + path, data=data, method=method,
                                         headers={"Content-Type": "application/json"})
        with urllib.request.urlopen(request, timeout=5) as response:
            text = response.read()
        return json.loads(text) if text else None

    def alerts(self, active: bool | None = None) -> list[dict]:
        """The alerts it holds (resolved ones too until they are gone), or only active/inactive ones."""
        query = "" if active is None else f"?active={str(active).lower()}&silenced=true&inhibited=true" \
                                          f"&unprocessed=true"
        try:
            return self.api("alerts" + query)
        except (urllib.error.URLError, OSError):
            return []

    def silence(self, matchers: dict[str, str], hours: float = 1.0) -> str:
        now = time.time()
        body = {"matchers": [{"name": k, "value": v, "isRegex": False, "isEqual": True} for k, v in matchers.items()],
                "startsAt": _iso(now - 1), "endsAt": _iso(now + hours * 3600), "createdBy": "telesum tests",
                "comment": "test silence"}
        return self.api("silences", body)["silenceID"]


def _iso(t: float) -> str:
    return time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(t)) + f".{int(t % 1 * 1000):03d}Z"


def notifications(receiver: Recorder) -> list[dict]:
    """The webhook notifications a real Alertmanager sent (each: status, alerts, groupLabels, …)."""
    return [p["body"] for p in receiver.snapshot() if p["path"] == "/hook"]
