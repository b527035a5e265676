"""WorkerMetrics from the read-only snapshots: loop counters as deltas of the loop's counts, gauges from
its queues and consumer, each partition's lag, per-record timings and tokens from Summaries, the
Summarizer's counters, the HTTP endpoint and the gpu label."""

from __future__ import annotations

import dataclasses
import urllib.request

import pytest
import torch

from tests.ops.helpers import loop_stats, summarizer_stats
from worker.kafka.loop import PartitionStats, WorkerStats
from worker.messages import Summary, Timings
from worker.metrics import _STAT_COUNTERS, _SUMMARIZER_COUNTERS, WorkerMetrics, gpu_label
from worker.summarizer.summarizer import SummarizerStats

LABELS = {"gpu": "cpu", "worker": "w-1"}


def _value(metrics: WorkerMetrics, name: str, **extra) -> float | None:
    return metrics.registry.get_sample_value(name, {**LABELS, **extra})


def _summary(prompt: int, output: int, prefill: float, decode: float, hierarchical: bool = False) -> Summary:
    return Summary(id="x", summary="s", model="m", prompt_tokens=prompt, output_tokens=output,
                   hierarchical=hierarchical,
                   timings=Timings(queued_s=0.001, prefill_s=prefill, decode_s=decode, total_s=prefill + decode))


def test_metrics_every_counter_reads_a_field_of_its_snapshot():
    assert set(_STAT_COUNTERS) <= {f.name for f in dataclasses.fields(WorkerStats)}
    assert set(_SUMMARIZER_COUNTERS) <= {f.name for f in dataclasses.fields(SummarizerStats)}


def test_metrics_observe_loop_counters_follow_stats_deltas():
    metrics = WorkerMetrics("cpu", "w-1")
    counts = WorkerStats(consumed=5, summaries=3, reasons={"invalid_json": 1})
    metrics.observe_loop(loop_stats(counts))
    metrics.observe_loop(loop_stats(counts))  # unchanged stats add nothing
    counts = WorkerStats(consumed=9, summaries=7, commits=2, answered_before=3,
                         reasons={"invalid_json": 2, "empty_body": 1})
    metrics.observe_loop(loop_stats(counts))
    assert _value(metrics, "telesum_answered_before_total") == 3
    assert _value(metrics, "telesum_records_consumed_total") == 9
    assert _value(metrics, "telesum_summaries_published_total") == 7
    assert _value(metrics, "telesum_commits_total") == 2
    assert _value(metrics, "telesum_dead_letters_total", reason="invalid_json") == 2
    assert _value(metrics, "telesum_dead_letters_total", reason="empty_body") == 1


def test_metrics_observe_loop_gauges_show_queues_partitions_and_commit_lag():
    metrics = WorkerMetrics("cpu", "w-1")
    metrics.observe_loop(loop_stats(backlog=2, in_summarizer=5, unfinished_answers=1, assigned=2, paused=1,
                                    commit_lag=4, held_back=6))
    assert _value(metrics, "telesum_answers_held_back") == 6
    assert _value(metrics, "telesum_backlog_records") == 2
    assert _value(metrics, "telesum_in_flight_records") == 5
    assert _value(metrics, "telesum_unacked_publishes") == 1
    assert _value(metrics, "telesum_assigned_partitions") == 2
    assert _value(metrics, "telesum_paused_partitions") == 1
    assert _value(metrics, "telesum_commit_lag_records") == 4


def test_metrics_undecodable_batches_counted_and_stuck_partitions_shown():
    metrics = WorkerMetrics("cpu", "w-1")
    stuck = [{"topic": "in", "partition": 0, "offset": 7}]
    metrics.observe_loop(loop_stats(stuck=stuck, undecodable_batches=1))
    metrics.observe_loop(loop_stats(stuck=stuck, undecodable_batches=3))  # two failed retries
    assert _value(metrics, "telesum_undecodable_batches_total") == 3
    assert _value(metrics, "telesum_stuck_partitions") == 1
    metrics.observe_loop(loop_stats(undecodable_batches=3))
    assert _value(metrics, "telesum_stuck_partitions") == 0
    assert _value(metrics, "telesum_undecodable_batches_total") == 3


def test_metrics_observe_partitions_sets_lag_and_drops_a_revoked_partitions_series():
    metrics = WorkerMetrics("cpu", "w-1")
    metrics.observe_partitions((PartitionStats("in", 0, 3, True, 10), PartitionStats("in", 1, 0, False, None)))
    assert _value(metrics, "telesum_consumer_lag_records", topic="in", partition="0") == 10
    assert _value(metrics, "telesum_consumer_lag_records", topic="in", partition="1") is None  # log end unknown
    assert metrics.partitions == {("in", 0): {"lag": 10, "in_flight": 3, "paused": True},
                                  ("in", 1): {"lag": None, "in_flight": 0, "paused": False}}
    metrics.observe_partitions((PartitionStats("in", 1, 0, False, 2),))
    assert _value(metrics, "telesum_consumer_lag_records", topic="in", partition="0") is None
    assert set(metrics.partitions) == {("in", 1)}


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


def test_metrics_summarizer_queue_depth_bin_counters_and_engine_busy():
    metrics = WorkerMetrics("cpu", "w-1")
    metrics.observe_summarizer(summarizer_stats(queue_seqs=3, queue_tokens=900, bin_fill_ratio=0.8, bins=4,
                                                bin_real_tokens=5000, bin_pad_tokens=40, engine_sequences=7),
                               elapsed_s=float("inf"))
    assert _value(metrics, "telesum_summarizer_queue_sequences") == 3
    assert _value(metrics, "telesum_summarizer_queue_tokens") == 900
    assert _value(metrics, "telesum_engine_sequences") == 7
    assert _value(metrics, "telesum_engine_busy_ratio") == 1.0
    assert _value(metrics, "telesum_bin_fill_ratio") == pytest.approx(0.8)
    assert _value(metrics, "telesum_bins_total") == 4
    metrics.observe_summarizer(summarizer_stats(bins=6, bin_real_tokens=5000, bin_pad_tokens=50,
                                                out_of_memory_events=2), elapsed_s=5.0)
    assert _value(metrics, "telesum_bins_total") == 6
    assert _value(metrics, "telesum_gpu_out_of_memory_total") == 2
    assert _value(metrics, "telesum_bin_pad_tokens_total") == 50
    assert _value(metrics, "telesum_bin_real_tokens_total") == 5000
    assert _value(metrics, "telesum_engine_busy_ratio") == pytest.approx(0.5)  # idle for half the window


def test_metrics_serve_http_exposes_labelled_series():
    metrics = WorkerMetrics("cpu", "w-1")
    metrics.observe_loop(loop_stats(WorkerStats(consumed=11)))
    port = metrics.serve(0, addr="127.0.0.1")
    text = urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=10).read().decode()
    assert 'telesum_records_consumed_total{gpu="cpu",worker="w-1"} 11.0' in text
    assert "# TYPE telesum_prefill_seconds histogram" in text


def test_metrics_two_instances_own_registries_count_apart():
    first, second = WorkerMetrics("0", "a"), WorkerMetrics("1", "b")  # same names: no duplicate error
    first.observe_loop(loop_stats(WorkerStats(consumed=4)))
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


def test_metrics_prefix_cache_hit_tokens_and_occupancy_sampled():
    metrics = WorkerMetrics("cpu", "w-1")
    metrics.observe_summarizer(summarizer_stats(prefix_hit_tokens=300, prefix_lookup_tokens=1000,
                                                prefix_occupancy=0.25), elapsed_s=1.0)
    assert _value(metrics, "telesum_prefix_hit_tokens_total") == 300
    assert _value(metrics, "telesum_prefix_lookup_tokens_total") == 1000
    assert _value(metrics, "telesum_prefix_cache_occupancy") == 0.25
    metrics.observe_summarizer(summarizer_stats(prefix_hit_tokens=800, prefix_lookup_tokens=2000,
                                                prefix_occupancy=0.5), elapsed_s=1.0)
    assert _value(metrics, "telesum_prefix_hit_tokens_total") == 800
    assert _value(metrics, "telesum_prefix_cache_occupancy") == 0.5
