"""Operating a running `telesum worker` on a real broker: /readyz before the model and during the
drain, /metrics and the status page moving as records flow, hostile record strings shown as text in
headless Chromium, the bearer token, JSON logs with the banner and per-bin lines, and no secret in
any of them."""

from __future__ import annotations

import json
import os
import re
import shutil
import signal
import socket
import subprocess
import threading
import time
import urllib.error
import urllib.request
import uuid
from pathlib import Path

import msgspec
import pytest

from tests.kafka.helpers import ANSWER_WAIT_S, WorkerProcess, consume, produce, record
from worker.messages import TelemetryRecord

pytestmark = pytest.mark.kafka

SECRET_PASSWORD = "hunter2-sasl-Zq81"
TOKEN = "tok-status-K7d2"
# If the page ever parsed record text as markup, this would run and mark the body.
XSS_ID = "<img src=x onerror=\"document.body.setAttribute('data-pwned','img')\">"
XSS_BODY = "<134>1 2026-01-01T10:00:00Z gnb-x rrc - - - link <script>document.body.dataset.pwned='script'</script> down"
CHROMIUM = shutil.which("chromium") or shutil.which("chromium-browser")
# Set by .ci/run: there the browser must be installed, so its absence fails instead of skipping.
REQUIRE_BROWSER = os.environ.get("REQUIRE_BROWSER_TESTS") == "1"
SCREENSHOT = os.environ.get("STATUS_PAGE_SCREENSHOT")  # docs/status-page.png is made with this


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _get(url: str, token: str | None = None) -> tuple[int, bytes]:
    req = urllib.request.Request(url, headers={"Authorization": f"Bearer {token}"} if token else {})
    try:
        with urllib.request.urlopen(req, timeout=10) as resp:
            return resp.status, resp.read()
    except urllib.error.HTTPError as exc:
        return exc.code, exc.read()


def _until(what, check, worker: WorkerProcess, wait_s: float = ANSWER_WAIT_S):
    deadline = time.monotonic() + wait_s
    while time.monotonic() < deadline:
        got = check()
        if got:
            return got
        assert worker.proc.poll() is None, f"worker exited:\n{worker.log()[-3000:]}"
        time.sleep(0.1)
    raise AssertionError(f"{what} not reached; worker log:\n{worker.log()[-3000:]}")


def _metric(text: str, name: str) -> float:
    return sum(float(line.rsplit(" ", 1)[1]) for line in text.splitlines() if line.startswith(name + "{"))


def _chromium(url: str, out: Path, screenshot: Path | None = None) -> str:
    """The page's DOM after its script ran (and a screenshot), from headless Chromium."""
    base = [CHROMIUM, "--headless", "--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage",
            "--virtual-time-budget=8000", "--window-size=1280,1500", f"--user-data-dir={out / 'profile'}"]
    dom = subprocess.run(base + ["--dump-dom", url], capture_output=True, text=True, timeout=120)
    assert dom.returncode == 0, dom.stderr[-2000:]
    if screenshot is not None:
        shot = subprocess.run(base + [f"--screenshot={screenshot}", url], capture_output=True, text=True,
                              timeout=120)
        assert shot.returncode == 0 and screenshot.stat().st_size > 10_000, shot.stderr[-2000:]
    return dom.stdout


@pytest.fixture
def ops_worker(kafka_bootstrap, make_topic, tokenizer_dir, tmp_path, monkeypatch):
    monkeypatch.setenv("KAFKA_SASL_PASSWORD", SECRET_PASSWORD)  # PLAINTEXT ignores it; it must never show
    monkeypatch.setenv("TELESUM_STATUS_TOKEN", TOKEN)
    inp, out, dlq = make_topic("in", 2), make_topic("out"), make_topic("dlq")
    port = _free_port()
    worker = WorkerProcess(kafka_bootstrap, inp, out, dlq, f"g-{uuid.uuid4().hex}", tokenizer_dir,
                           tmp_path / "worker.log", **{"metrics-port": str(port), "bind-address": "127.0.0.1",
                                                       "log-format": "json", "log-level": "debug",
                                                       "max-new-tokens": "8"})
    yield worker, f"http://127.0.0.1:{port}", (inp, out, dlq)
    if worker.proc.poll() is None:
        worker.kill()


def test_ops_readiness_metrics_status_page_and_logs_follow_a_real_run(kafka_bootstrap, ops_worker, tmp_path):
    worker, base, (inp, out, dlq) = ops_worker
    # /readyz answers before the model is loaded (the port opens first), and says why it is not ready.
    first = _until("the HTTP port", lambda: _try(base + "/readyz"), worker, wait_s=60)
    assert first[0] == 503 and json.loads(first[1])["checks"]["model_loaded"] is False
    assert _get(base + "/healthz")[0] == 200
    _until("/readyz 200", lambda: _get(base + "/readyz")[0] == 200, worker)
    ready = json.loads(_get(base + "/readyz")[1])
    assert ready["checks"] == {"model_loaded": True, "partitions_assigned": True, "broker_reachable": True,
                               "not_draining": True, "no_stuck_partitions": True} and ready["assigned_partitions"] == 2
    metrics_before = _get(base + "/metrics")[1].decode()
    assert _metric(metrics_before, "telesum_summaries_published_total") == 0

    hostile = TelemetryRecord(id=XSS_ID, kind="syslog", body=XSS_BODY, source="<script>x()</script>")
    values = [msgspec.json.encode(record(i)) for i in range(12)] + [msgspec.json.encode(hostile), b"{not json"]
    produce(kafka_bootstrap, inp, values)
    consume(kafka_bootstrap, [out, dlq], lambda g: len(g) >= len(values))

    # The data needs the token; the page moves with the records.
    assert _get(base + "/status.json")[0] == 401 and _get(base + "/status.json", "wrong")[0] == 401
    status = _until("the status page counting every answer", lambda: _status_done(base, 13), worker)
    assert status["dead_letters"] == {"invalid_json": 1}
    assert XSS_ID in {row["id"] for row in status["latest"]}
    assert {p["partition"] for p in status["partitions"]} == {0, 1}  # and every lag 0 (_status_done)
    assert status["engine"]["bins"] >= 1 and status["about"]["attention_backend"] == "sdpa"
    metrics = _get(base + "/metrics")[1].decode()
    assert _metric(metrics, "telesum_summaries_published_total") == 13
    assert _metric(metrics, "telesum_dead_letters_total") == 1
    assert "telesum_consumer_lag_records{" in metrics

    if CHROMIUM is None:
        if REQUIRE_BROWSER:
            pytest.fail("chromium is not installed (REQUIRE_BROWSER_TESTS=1): apt-get install -y chromium")
    else:
        shot = Path(SCREENSHOT).resolve() if SCREENSHOT else tmp_path / "status.png"
        dom = _chromium(f"{base}/status#token={TOKEN}", tmp_path, screenshot=shot)
        body_tag = re.search(r"<body[^>]*>", dom).group(0)
        assert 'data-loaded="yes"' in body_tag, dom[-3000:]  # the script ran and rendered the data
        assert "pwned" not in body_tag                       # the hostile strings did not
        assert "&lt;img src=x onerror=" in dom and "&lt;script&gt;document.body.dataset.pwned" in dom
        assert "<img src=\"x\"" not in dom and dom.count("<script") == 1  # only the page's own script
        refused = _chromium(f"{base}/status#token=wrong", tmp_path)
        assert "token refused" in refused and XSS_ID.replace("<", "&lt;") not in refused

    # SIGTERM: /readyz turns false while the worker drains, before the port closes.
    produce(kafka_bootstrap, inp, [msgspec.json.encode(record(i)) for i in range(100, 160)])
    _until("records in flight", lambda: json.loads(_get(base + "/status.json", TOKEN)[1])["stats"]["consumed"] > 20,
           worker)
    seen: list[tuple[int, bytes]] = []
    poller = threading.Thread(target=_poll_until_closed, args=(base + "/readyz", seen), daemon=True)
    worker.signal(signal.SIGTERM)
    poller.start()
    assert worker.wait() == 0, worker.log()[-3000:]
    poller.join(30)
    draining = [json.loads(body) for code, body in seen if code == 503]
    # (a probe answered before the signal handler ran may still say 200)
    assert draining and all(d["checks"]["not_draining"] is False for d in draining), seen[-3:]

    # JSON log lines: the banner with its budgets' sources, one debug line per bin, no secret anywhere.
    log_text = worker.log()
    lines = [json.loads(line) for line in log_text.splitlines() if line.startswith("{")]
    assert lines and len(lines) == len([x for x in log_text.splitlines() if x.strip()]), log_text[-2000:]
    banner = next(x["banner"] for x in lines if "banner" in x)
    assert banner["attention_backend"] == "sdpa" and banner["device"] == "cpu"
    assert banner["budget_sources"]["token_budget"] == "flag --token-budget"
    assert banner["budget_sources"]["max_seqs_per_bin"] == "default for cpu"
    bins = [x for x in lines if x["logger"] == "worker.bins"]
    assert bins and all(x["level"] == "debug" and x["bin_seqs"] >= 1 for x in bins)
    for text in (log_text, metrics, json.dumps(status)):
        assert SECRET_PASSWORD not in text and TOKEN not in text


def _try(url: str):
    try:
        return _get(url)
    except OSError:
        return None


def _status_done(base: str, summaries: int):
    code, body = _get(base + "/status.json", TOKEN)
    if code != 200:
        return None
    data = json.loads(body)
    stats = data["stats"]
    caught_up = data["partitions"] and all(p["lag"] == 0 for p in data["partitions"])
    # The engine's counters are sampled every quarter second: a fast run can answer everything first.
    sampled = (data["engine"]["bins"] or 0) >= 1
    return data if (stats.get("summaries") == summaries and stats.get("dead_letters") == 1 and caught_up
                    and sampled) else None


def _poll_until_closed(url: str, seen: list) -> None:
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        try:
            seen.append(_get(url))
        except OSError:  # the port closed: the worker is gone
            return
        time.sleep(0.005)
