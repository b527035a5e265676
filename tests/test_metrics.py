"""WorkerMetrics: loop counters as deltas of WorkerStats, gauges from the loop's state, per-record
timings and tokens from Summaries, dispatcher/engine sampling, the HTTP endpoint and the gpu label."""

from __future__ import annotations

import urllib.request
from types import SimpleNamespace

import pytest
import torch
from kafka import TopicPartition

from worker.kafka.loop import WorkerStats
from worker.kafka.offsets import OffsetTracker
from worker.messages import Summary, TelemetryRecord, Timings
from worker.metrics import MeteredSummarizer, WorkerMetrics, gpu_label

LABELS = {"gpu": "cpu", "worker": "w-1"}


def _value(metrics: WorkerMetrics, name: str, **extra) -> float | None:
    return metrics.registry.get_sample_value(name, {**LABELS, **extra})


class _FakeLoop:
    """What observe_loop reads from a KafkaWorker."""

    def __init__(self) -> None:
        self.stats = WorkerStats()
        self.pending = (0, 0, 0)
        self.tracker = OffsetTracker()
        self.consumer = SimpleNamespace(paused=lambda: self.paused)
        self.paused: set[TopicPartition] = set()


def _summary(prompt: int, output: int, prefill: float, decode: float, hierarchical: bool = False) -> Summary:
    return Summary(id="x", summary="s", model="m", prompt_tokens=prompt, output_tokens=output,
                   hierarchical=hierarchical,
                   timings=Timings(queued_s=0.001, prefill_s=prefill, decode_s=decode, total_s=prefill + decode))


def test_metrics_observe_loop_counters_follow_stats_deltas():
    metrics, loop = WorkerMetrics("cpu", "w-1"), _FakeLoop()
    loop.stats.consumed, loop.stats.summaries = 5, 3
    loop.stats.reasons = {"invalid_json": 1}
    metrics.observe_loop(loop)
    metrics.observe_loop(loop)  # unchanged stats add nothing
    loop.stats.consumed, loop.stats.summaries, loop.stats.commits = 9, 7, 2
    loop.stats.reasons = {"invalid_json": 2, "empty_body": 1}
    metrics.observe_loop(loop)
    assert _value(metrics, "telesum_records_consumed_total") == 9
    assert _value(metrics, "telesum_summaries_published_total") == 7
    assert _value(metrics, "telesum_commits_total") == 2
    assert _value(metrics, "telesum_dead_letters_total", reason="invalid_json") == 2
    assert _value(metrics, "telesum_dead_letters_total", reason="empty_body") == 1


def test_metrics_observe_loop_gauges_show_queues_partitions_and_commit_lag():
    metrics, loop = WorkerMetrics("cpu", "w-1"), _FakeLoop()
    a, b = TopicPartition("in", 0), TopicPartition("in", 1)
    for tp in (a, b):
        loop.tracker.assign(tp)
    epoch = [loop.tracker.track(a, off) for off in range(4)][0]
    loop.tracker.track(b, 10)
    loop.tracker.mark_done(a, 0, epoch)  # offset 0 joins the done prefix: 3 + 1 records hold the commit
    loop.pending, loop.paused = (2, 5, 1), {a}
    metrics.observe_loop(loop)
    assert _value(metrics, "telesum_backlog_records") == 2
    assert _value(metrics, "telesum_in_flight_records") == 5
    assert _value(metrics, "telesum_unacked_publishes") == 1
    assert _value(metrics, "telesum_assigned_partitions") == 2
    assert _value(metrics, "telesum_paused_partitions") == 1
    assert _value(metrics, "telesum_commit_lag_records") == 4


def test_metrics_undecodable_batches_counted_and_stuck_partitions_shown():
    metrics, loop = WorkerMetrics("cpu", "w-1"), _FakeLoop()
    loop.consumer.stuck, loop.consumer.undecodable_batches = {TopicPartition("in", 0): object()}, 1
    metrics.observe_loop(loop)
    loop.consumer.undecodable_batches = 3  # two failed retries
    metrics.observe_loop(loop)
    assert _value(metrics, "telesum_undecodable_batches_total") == 3
    assert _value(metrics, "telesum_stuck_partitions") == 1
    loop.consumer.stuck = {}
    metrics.observe_loop(loop)
    assert _value(metrics, "telesum_stuck_partitions") == 0


def test_metrics_observe_results_timings_and_tokens_failures_skipped():
    metrics = WorkerMetrics("cpu", "w-1")
    metrics.observe_results([("a", _summary(100, 10, 0.02, 0.3)), ("b", RuntimeError("boom")),
                             ("c", _summary(3000, 20, 0.5, 1.5, hierarchical=True))])
    assert _value(metrics, "telesum_prompt_tokens_total") == 3100
    assert _value(metrics, "telesum_output_tokens_total") == 30
    assert _value(metrics, "telesum_prefill_seconds_count") == 2
    assert _value(metrics, "telesum_prefill_seconds_sum") == pytest.approx(0.52)
    assert _value(metrics, "telesum_decode_seconds_bucket", le="0.5") == 1
    assert _value(metrics, "telesum_record_seconds_count") == 2
    assert _value(metrics, "telesum_prompt_tokens_per_record_bucket", le="128.0") == 1
    assert _value(metrics, "telesum_hierarchical_records_total") == 1


class _FakeSummarizer:
    def __init__(self) -> None:
        self.submitted: list = []
        self.results: list = []
        self.dispatcher = SimpleNamespace(stats=lambda: dict(self.dispatch_stats))
        self.engine = SimpleNamespace(num_unfinished=0)
        self.dispatch_stats = {"queue_seqs": 3.0, "queue_tokens": 900.0, "fill_ratio": 0.8, "bins": 4.0,
                               "tokens_packed": 5000.0, "pad_tokens": 40.0}

    def submit(self, request_id, record) -> None:
        self.submitted.append((request_id, record))

    def poll(self, timeout: float):
        out, self.results = self.results, []
        return out


def test_metered_summarizer_passes_through_and_measures():
    metrics, inner = WorkerMetrics("cpu", "w-1"), _FakeSummarizer()
    metered = metrics.watch_summarizer(inner)
    assert isinstance(metered, MeteredSummarizer)
    record = TelemetryRecord(id="r", kind="text", body="link down")
    metered.submit("rid", record)
    inner.results = [("rid", _summary(50, 5, 0.01, 0.02))]
    assert metered.poll(0.0) == [("rid", _summary(50, 5, 0.01, 0.02))]
    assert inner.submitted == [("rid", record)]
    assert _value(metrics, "telesum_output_tokens_total") == 5


def test_metrics_summarizer_sampled_queue_depth_and_bin_counters(monkeypatch):
    monkeypatch.setattr("worker.metrics._SAMPLE_INTERVAL_S", 0.0)  # every loop step samples
    metrics, inner = WorkerMetrics("cpu", "w-1"), _FakeSummarizer()
    metrics.watch_summarizer(inner)
    inner.engine.num_unfinished = 7
    metrics.observe_loop(_FakeLoop())
    assert _value(metrics, "telesum_summarizer_queue_sequences") == 3
    assert _value(metrics, "telesum_summarizer_queue_tokens") == 900
    assert _value(metrics, "telesum_engine_sequences") == 7
    assert _value(metrics, "telesum_bin_fill_ratio") == pytest.approx(0.8)
    assert _value(metrics, "telesum_bins_total") == 4
    inner.dispatch_stats.update(bins=6.0, pad_tokens=50.0)
    metrics.observe_loop(_FakeLoop())
    assert _value(metrics, "telesum_bins_total") == 6
    assert _value(metrics, "telesum_bin_pad_tokens_total") == 50
    assert _value(metrics, "telesum_bin_real_tokens_total") == 5000


def test_metrics_serve_http_exposes_labelled_series():
    metrics, loop = WorkerMetrics("cpu", "w-1"), _FakeLoop()
    loop.stats.consumed = 11
    metrics.observe_loop(loop)
    port = metrics.serve(0, addr="127.0.0.1")
    text = urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=10).read().decode()
    assert 'telesum_records_consumed_total{gpu="cpu",worker="w-1"} 11.0' in text
    assert "# TYPE telesum_prefill_seconds histogram" in text


def test_metrics_two_instances_own_registries_count_apart():
    first, second = WorkerMetrics("0", "a"), WorkerMetrics("1", "b")  # same names: no duplicate error
    loop = _FakeLoop()
    loop.stats.consumed = 4
    first.observe_loop(loop)
    assert first.registry.get_sample_value("telesum_records_consumed_total", {"gpu": "0", "worker": "a"}) == 4
    assert second.registry.get_sample_value("telesum_records_consumed_total", {"gpu": "1", "worker": "b"}) == 0


def test_gpu_label_cpu_index_and_visible_devices(monkeypatch):
    assert gpu_label(torch.device("cpu")) == "cpu"
    monkeypatch.delenv("CUDA_VISIBLE_DEVICES", raising=False)
    assert gpu_label(torch.device("cuda", 1)) == "1"
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "4,5")
    assert gpu_label(torch.device("cuda", 1)) == "5" and gpu_label(torch.device("cuda")) == "4"


def test_settings_metrics_port_out_of_range_raises():
    from worker.settings.fields import SettingsError
    from worker.settings.load import load_settings

    with pytest.raises(SettingsError, match=r"--metrics-port, TELESUM_METRICS_PORT\).*<= 65535.*'70000'"):
        load_settings(None, {"TELESUM_METRICS_PORT": "70000"})
    assert load_settings(None, {}).settings.http.metrics_port == 0  # off unless asked for


def test_metrics_prefix_cache_hit_tokens_and_occupancy_sampled(monkeypatch):
    monkeypatch.setattr("worker.metrics._SAMPLE_INTERVAL_S", 0.0)
    metrics, inner = WorkerMetrics("cpu", "w-1"), _FakeSummarizer()
    stats = {"hit_tokens": 300, "lookup_tokens": 1000, "occupancy": 0.25}
    inner.prefix = SimpleNamespace(stats=lambda: dict(stats))
    metrics.watch_summarizer(inner)
    metrics.observe_loop(_FakeLoop())
    assert _value(metrics, "telesum_prefix_hit_tokens_total") == 300
    assert _value(metrics, "telesum_prefix_lookup_tokens_total") == 1000
    assert _value(metrics, "telesum_prefix_cache_occupancy") == 0.25
    stats.update(hit_tokens=800, lookup_tokens=2000, occupancy=0.5)
    metrics.observe_loop(_FakeLoop())
    assert _value(metrics, "telesum_prefix_hit_tokens_total") == 800
    assert _value(metrics, "telesum_prefix_cache_occupancy") == 0.5
