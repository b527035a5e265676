"""Health checks, the HTTP server (routes, token, headers) and JSON logging, without a broker."""

from __future__ import annotations

import json
import logging
import time
import urllib.error
import urllib.request
import pytest

from worker.kafka.loop import ConsumerStats
from worker.metrics import WorkerMetrics
from worker.ops.health import Health, tcp_reachable
from worker.ops.logs import JsonFormatter, configure_logging
from worker.ops.server import OpsServer
from worker.ops.status import StatusBoard
from worker.settings.sections import LogSettings


def _consumer(stable: bool = True, stuck=()) -> ConsumerStats:
    return ConsumerStats(stable=stable, paused=0, stuck=tuple(stuck), undecodable_batches=0)


def test_health_ready_only_when_every_check_holds():
    draining, broker = [False], [True]
    h = Health(lambda: broker[0], stall_after_s=60, draining=lambda: draining[0])
    ok, body = h.readiness()
    assert not ok and body["checks"]["model_loaded"] is False and body["checks"]["partitions_assigned"] is False
    h.set_model_loaded()
    h.observe(0, _consumer())
    assert not h.readiness()[0]  # no partitions yet
    h.observe(2, _consumer(stable=False))
    assert not h.readiness()[0]  # a rebalance is under way
    h.observe(2, _consumer())
    assert h.readiness() == (True, {"ready": True, "assigned_partitions": 2, "stuck_partitions": [], "checks": {
        "model_loaded": True, "partitions_assigned": True, "broker_reachable": True, "not_draining": True,
        "no_stuck_partitions": True}})
    draining[0] = True
    ok, body = h.readiness()
    assert not ok and body["checks"]["not_draining"] is False


def test_health_stuck_partition_not_ready_and_named():
    from kafka import TopicPartition

    from worker.kafka.undecodable import StuckPartition

    h = Health(lambda: True, stall_after_s=60)
    h.set_model_loaded()
    stuck = StuckPartition(TopicPartition("ves", 3), 1200, "UnsupportedCodecError: zstd", time.time())
    h.observe(4, _consumer(stuck=[stuck.describe()]))
    ok, body = h.readiness()
    assert not ok and body["checks"]["no_stuck_partitions"] is False
    assert [(s["topic"], s["partition"], s["offset"], s["reason"]) for s in body["stuck_partitions"]] == [
        ("ves", 3, 1200, "UnsupportedCodecError: zstd")]
    h.observe(4, _consumer())
    assert h.readiness()[0]


def test_health_broker_unreachable_not_ready(monkeypatch):
    monkeypatch.setattr("worker.ops.health._BROKER_CHECK_TTL_S", 0.0)
    h = Health(lambda: tcp_reachable("127.0.0.1:1"), stall_after_s=60)
    h.set_model_loaded()
    h.observe(1, _consumer())
    ok, body = h.readiness()
    assert not ok and body["checks"]["broker_reachable"] is False


def test_health_liveness_fails_when_the_loop_stalls():
    h = Health(lambda: True, stall_after_s=0.05)
    assert h.liveness()[0]  # loading: no loop yet, alive
    h.observe(1, _consumer())
    assert h.liveness()[0]
    time.sleep(0.1)
    ok, body = h.liveness()
    assert not ok and body["loop_started"] is True


@pytest.fixture
def server():
    metrics = WorkerMetrics("cpu", "w-1")
    health = Health(lambda: True, stall_after_s=60)
    board = StatusBoard(metrics, {"worker": "w-1"}, [{"path": "http.status_token", "value": "***",
                                                       "source": "env", "env": "", "flag": ""}], health.readiness)
    ops = OpsServer(metrics.registry, health=health, status=board, token="s3cret")
    port = ops.start(0, "127.0.0.1")
    yield f"http://127.0.0.1:{port}", health
    ops.close()


def _get(url, token=None):
    req = urllib.request.Request(url, headers={"Authorization": f"Bearer {token}"} if token else {})
    try:
        with urllib.request.urlopen(req, timeout=10) as r:
            return r.status, dict(r.headers), r.read()
    except urllib.error.HTTPError as exc:
        return exc.code, dict(exc.headers), exc.read()


def test_server_routes_token_and_headers(server):
    base, health = server
    assert _get(base + "/readyz")[0] == 503
    health.set_model_loaded()
    health.observe(1, _consumer())
    assert _get(base + "/readyz")[0] == 200 and _get(base + "/healthz")[0] == 200
    code, headers, body = _get(base + "/metrics")
    assert code == 200 and b"telesum_records_consumed_total" in body
    code, headers, body = _get(base + "/status")
    assert code == 200 and "script-src 'self'" in headers["Content-Security-Policy"]
    assert headers["X-Content-Type-Options"] == "nosniff" and b"s3cret" not in body
    assert _get(base + "/status.js")[0] == 200 and _get(base + "/status.css")[0] == 200
    code, headers, _ = _get(base + "/status.json")
    assert code == 401 and headers["WWW-Authenticate"].startswith("Bearer")
    assert _get(base + "/status.json", "nope")[0] == 401
    code, _, body = _get(base + "/status.json", "s3cret")
    data = json.loads(body)
    assert code == 200 and data["ready"]["ready"] is True and b"s3cret" not in body
    assert _get(base + "/nothing")[0] == 404


def test_page_inserts_data_as_text_only():
    from worker.ops import page

    assert "innerHTML" not in page.JS and "insertAdjacentHTML" not in page.JS and "document.write" not in page.JS
    assert "<script>" not in page.HTML  # no inline script: the CSP forbids it anyway


def test_json_log_lines_carry_extra_fields():
    record = logging.LogRecord("worker.bins", logging.DEBUG, __file__, 1, "bin seqs=%d", (3,), None)
    record.bin_seqs = 3
    line = json.loads(JsonFormatter({"worker": "w-1"}).format(record))
    assert line["message"] == "bin seqs=3" and line["bin_seqs"] == 3 and line["worker"] == "w-1"
    assert line["level"] == "debug" and line["logger"] == "worker.bins"


def test_configure_logging_sets_level_and_keeps_foreign_handlers(caplog):
    configure_logging(LogSettings(format="json", level="warning"))
    assert logging.getLogger().level == logging.WARNING and caplog.handler in logging.getLogger().handlers
    configure_logging(LogSettings())
    assert logging.getLogger().level == logging.INFO


def test_status_page_rows_carry_no_escape_sequences_or_control_characters():
    from worker.messages import Facts, Summary

    board = StatusBoard(WorkerMetrics("cpu", "w-1"), {"worker": "w-1"}, [])
    summary = Summary(id="ev\x1b[2J-1", summary="gnb-1: \x1b[31mlink down\x1b[0m\x00", model="m", prompt_tokens=1,
                      output_tokens=1, facts=Facts(entity="gnb\x07-1", problem="\x1b]0;owned\x07link down"))
    board.observe_results([("r", summary)])
    (row,) = board.snapshot()["latest"]
    assert (row["id"], row["summary"]) == ("ev-1", "gnb-1: link down")
    assert (row["facts"]["entity"], row["facts"]["problem"]) == ("gnb-1", "link down")
