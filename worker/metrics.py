"""Prometheus metrics of one worker process, labelled by `gpu` (its device index, or "cpu") and `worker`.

Fed by the one observer (worker/ops/observer.py) from the poll-loop thread, with read-only snapshots:
  - `observe_loop`: the KafkaWorker's `stats()` after every step: counters as deltas of its cumulative
    counts, gauges from its queues, consumer and offsets; `observe_partitions`: each partition's lag;
  - `observe_results`: per-record timings and token counts from each Summary;
  - `observe_summarizer`: the Summarizer's `stats()` (dispatcher, engine, prefix cache).
Exposed over HTTP by `serve(port)`; each process has its own registry and port.
"""

from __future__ import annotations

import dataclasses
import os
import time
from collections.abc import Hashable
from typing import TYPE_CHECKING, Any

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram, start_http_server

from worker.messages import Summary

if TYPE_CHECKING:  # the snapshots' types live above this layer
    from worker.alerting import AlertStats
    from worker.kafka.incident_loop import IncidentLoopStats
    from worker.kafka.loop import LoopStats, PartitionStats
    from worker.summarizer.summarizer import SummarizerStats

# The engine-busy gauge is a moving average over about this many seconds of samples.
_BUSY_WINDOW_S = 10.0
# Per-record phase times: a few ms (short prompt on a GPU) up to minutes (hierarchical 50k tokens on CPU).
_SECONDS_BUCKETS = (0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0, 120.0, 300.0)
_TOKEN_BUCKETS = (16, 64, 128, 256, 512, 1024, 2048, 4096, 8192, 16384, 65536)

# WorkerStats field -> counter (name, help)
_STAT_COUNTERS = {
    "consumed": ("telesum_records_consumed", "records polled from the input topic"),
    "summaries": ("telesum_summaries_published", "summaries the broker acknowledged"),
    "stale_dropped": ("telesum_stale_dropped", "results or acks dropped because their partition was revoked"),
    "republished": ("telesum_republished", "outputs sent again after a failed publish"),
    "commits": ("telesum_commits", "offset commits"),
    "backpressure_pauses": ("telesum_backpressure_pauses", "times the worker paused its partitions"),
    "answered_before": ("telesum_answered_before", "inputs skipped when read again: a commit listed them as answered"),
}
# SummarizerStats field -> cumulative counter (name, help)
_SUMMARIZER_COUNTERS = {
    "bins": ("telesum_bins", "packed prefill bins"),
    "bin_real_tokens": ("telesum_bin_real_tokens", "real tokens packed into bins"),
    "bin_pad_tokens": ("telesum_bin_pad_tokens", "alignment pad tokens in bins"),
    "prefix_hit_tokens": ("telesum_prefix_hit_tokens", "prompt tokens served from the prefix cache (not prefilled)"),
    "prefix_lookup_tokens": ("telesum_prefix_lookup_tokens", "prompt tokens looked up in the prefix cache"),
    "out_of_memory_events": ("telesum_gpu_out_of_memory",
                             "engine steps that ran out of GPU memory (each retried in smaller pieces)"),
}


def gpu_label(device: Any) -> str:
    """The `gpu` label for a torch device: the physical GPU id (through CUDA_VISIBLE_DEVICES), else "cpu"."""
    if getattr(device, "type", str(device)) != "cuda":
        return "cpu"
    index = device.index or 0
    visible = [v.strip() for v in os.environ.get("CUDA_VISIBLE_DEVICES", "").split(",") if v.strip()]
    return visible[index] if index < len(visible) else str(index)


class WorkerMetrics:
    """The metrics of one worker process. `observe_*` only from the poll-loop thread."""

    def __init__(self, gpu: str, worker: str, registry: CollectorRegistry | None = None) -> None:
        self.registry = registry if registry is not None else CollectorRegistry()
        self.labels = {"gpu": gpu, "worker": worker}
        names = tuple(self.labels)

        def counter(name: str, doc: str):
            return Counter(name, doc, names, registry=self.registry).labels(**self.labels)

        def gauge(name: str, doc: str):
            return Gauge(name, doc, names, registry=self.registry).labels(**self.labels)

        def histogram(name: str, doc: str, buckets):
            return Histogram(name, doc, names, buckets=buckets, registry=self.registry).labels(**self.labels)

        self._stat_counters = {key: counter(*spec) for key, spec in _STAT_COUNTERS.items()}
        self._dead_letters = Counter("telesum_dead_letters", "dead letters the broker acknowledged, by reason",
                                     names + ("reason",), registry=self.registry)
        self._last_stats: dict[str, int] = {}
        self.in_flight = gauge("telesum_in_flight_records", "records inside the summarizer, not yet answered")
        self.backlog = gauge("telesum_backlog_records", "decoded records waiting for room in the summarizer")
        self.unacked = gauge("telesum_unacked_publishes", "outputs sent, not yet acknowledged by the broker")
        self.assigned = gauge("telesum_assigned_partitions", "input partitions this worker holds")
        self.paused = gauge("telesum_paused_partitions", "input partitions paused for backpressure or drain")
        self.stuck = gauge("telesum_stuck_partitions",
                           "input partitions paused at a batch that cannot be decoded (missing codec, corrupt)")
        self.undecodable = counter("telesum_undecodable_batches",
                                   "fetched batches that could not be decoded, retries included")
        self.held_back = gauge("telesum_answers_held_back",
                               "answers ready but not published: the commit metadata cannot list their inputs yet")
        self.commit_lag = gauge("telesum_commit_lag_records",
                                "polled records not yet in a done prefix: what the commit position waits on")
        self.queue_seqs = gauge("telesum_summarizer_queue_sequences", "sequences waiting in the dispatcher")
        self.queue_tokens = gauge("telesum_summarizer_queue_tokens", "prompt tokens waiting in the dispatcher")
        self.engine_active = gauge("telesum_engine_sequences", "sequences admitted to the engine, unfinished")
        self.fill_ratio = gauge("telesum_bin_fill_ratio", "mean share of a bin's token budget used")
        self.engine_busy = gauge("telesum_engine_busy_ratio",
                                 "share of recent samples in which the engine (GPU) had work, ~10 s average")
        self._lag = Gauge("telesum_consumer_lag_records",
                          "records in the partition not yet answered: log end minus the done position",
                          names + ("topic", "partition"), registry=self.registry)
        # (topic, partition) -> {"lag", "in_flight", "paused"}; replaced whole, so readers on other
        # threads (the status page) see one consistent snapshot.
        self.partitions: dict[tuple[str, int], dict[str, int | bool | None]] = {}
        self._busy = 0.0
        self._summarizer_counters = {key: counter(*spec) for key, spec in _SUMMARIZER_COUNTERS.items()}
        self._last_summarizer: dict[str, float] = {}
        self.queued_s = histogram("telesum_queue_seconds", "per record: submit to first prefill", _SECONDS_BUCKETS)
        self.prefill_s = histogram("telesum_prefill_seconds", "per record: prefill time", _SECONDS_BUCKETS)
        self.decode_s = histogram("telesum_decode_seconds", "per record: decode time", _SECONDS_BUCKETS)
        self.record_s = histogram("telesum_record_seconds", "per record: submit to summary", _SECONDS_BUCKETS)
        self.prompt_tokens = counter("telesum_prompt_tokens", "prompt tokens summarised (tokens in)")
        self.output_tokens = counter("telesum_output_tokens", "summary tokens generated (tokens out)")
        self.prompt_size = histogram("telesum_prompt_tokens_per_record", "per record: prompt tokens",
                                     _TOKEN_BUCKETS)
        self.hierarchical = counter("telesum_hierarchical_records", "records summarised hierarchically")
        self.prefix_occupancy = gauge("telesum_prefix_cache_occupancy", "share of the prefix cache's blocks in use")
        self._incidents: _IncidentMetrics | None = None  # made when an incident loop first reports

    def serve(self, port: int, addr: str = "0.0.0.0") -> int:
        """Serve /metrics on `port` (0: any free port) from a daemon thread; returns the bound port."""
        server, _thread = start_http_server(port, addr=addr, registry=self.registry)
        return server.server_port

    # -- feeds (poll-loop thread) ---------------------------------------------------------
    def observe_loop(self, stats: LoopStats) -> None:
        """A KafkaWorker's `stats()`. Only from the loop thread."""
        counts = stats.counts
        for key, child in self._stat_counters.items():
            self._inc_delta(self._last_stats, key, getattr(counts, key), child)
        for reason, count in counts.reasons.items():
            self._inc_delta(self._last_stats, "reason:" + reason, count,
                            self._dead_letters.labels(reason=reason, **self.labels))
        self.backlog.set(stats.backlog)
        self.in_flight.set(stats.in_summarizer)
        self.unacked.set(stats.unfinished_answers)
        self.commit_lag.set(stats.commit_lag)
        self.held_back.set(stats.held_back)
        self.assigned.set(stats.assigned)
        self.paused.set(stats.consumer.paused)
        self.stuck.set(len(stats.consumer.stuck))
        self._inc_delta(self._last_stats, "undecodable", stats.consumer.undecodable_batches, self.undecodable)

    def observe_partitions(self, partitions: tuple[PartitionStats, ...]) -> None:
        """Each assigned partition's lag (`stats(lag=True)`); a revoked partition's series goes."""
        snapshot: dict[tuple[str, int], dict[str, int | bool | None]] = {}
        for p in partitions:
            if p.lag is not None:
                self._lag.labels(topic=p.topic, partition=str(p.partition), **self.labels).set(p.lag)
            snapshot[(p.topic, p.partition)] = {"lag": p.lag, "in_flight": p.in_flight, "paused": p.paused}
        for key in set(self.partitions) - set(snapshot):  # revoked: its series would lie
            try:
                self._lag.remove(*self.labels.values(), key[0], str(key[1]))
            except KeyError:
                pass
        self.partitions = snapshot

    def observe_incidents(self, stats: IncidentLoopStats) -> None:
        """The incident loop's `stats()` after every step. Only from that loop's thread."""
        if self._incidents is None:
            self._incidents = _IncidentMetrics(self.registry, self.labels)
        self._incidents.observe(stats)

    def observe_results(self, results: list[tuple[Hashable, Summary | Exception]]) -> None:
        """Per-record timings and token counts of finished summaries (failures count as dead letters)."""
        for _, result in results:
            if not isinstance(result, Summary):
                continue
            t = result.timings
            self.queued_s.observe(t.queued_s)
            self.prefill_s.observe(t.prefill_s)
            self.decode_s.observe(t.decode_s)
            self.record_s.observe(t.total_s)
            self.prompt_tokens.inc(result.prompt_tokens)
            self.output_tokens.inc(result.output_tokens)
            self.prompt_size.observe(result.prompt_tokens)
            if result.hierarchical:
                self.hierarchical.inc()

    def observe_summarizer(self, stats: SummarizerStats, elapsed_s: float) -> None:
        """The Summarizer's `stats()`, `elapsed_s` after the previous sample (inf for the first)."""
        self.queue_seqs.set(stats.queue_seqs)
        self.queue_tokens.set(stats.queue_tokens)
        self.fill_ratio.set(stats.bin_fill_ratio)
        for key, child in self._summarizer_counters.items():
            self._inc_delta(self._last_summarizer, key, getattr(stats, key), child)
        self.prefix_occupancy.set(stats.prefix_occupancy)
        active = stats.engine_sequences
        self.engine_active.set(active)
        weight = min(1.0, elapsed_s / _BUSY_WINDOW_S)
        self._busy += weight * ((1.0 if active else 0.0) - self._busy)
        self.engine_busy.set(self._busy)

    @staticmethod
    def _inc_delta(last: dict, key: str, value: float, child) -> None:
        delta = value - last.get(key, 0)
        if delta > 0:
            child.inc(delta)
        last[key] = value


class _IncidentMetrics:
    """Alarms in, incidents open, alarms per incident, time to open: the incident loop's figures."""

    def __init__(self, registry: CollectorRegistry, labels: dict[str, str]) -> None:
        names = tuple(labels)
        self.alarms = Counter("telesum_incident_alarms", "alarms read by the incident loop", names,
                              registry=registry).labels(**labels)
        self.events = Counter("telesum_incident_events", "incident events acknowledged (exactly-once: committed)",
                              names, registry=registry).labels(**labels)
        self.open = Gauge("telesum_incidents_open", "incidents opened and not yet resolved or merged", names,
                          registry=registry).labels(**labels)
        self.size = Histogram("telesum_incident_alarms_per_incident", "alarms of an incident when it resolves",
                              names, buckets=(1, 2, 5, 10, 15, 25, 50, 100, 250, 500, 1000, 5000),
                              registry=registry).labels(**labels)
        self.open_s = Histogram("telesum_incident_open_seconds", "an incident's first alarm read to its open "
                                "event acknowledged", names, buckets=_SECONDS_BUCKETS, registry=registry).labels(**labels)
        self.follow_ups = Counter(
            "telesum_incident_follow_ups", "requests for the model's text of a new incident, by outcome: requested, "
            "dropped (the bound was full or the Summarizer refused), written (an update sent), empty (the model "
            "stopped at the grounded opening), failed, stale (its incident or partition gone meanwhile)",
            (*names, "outcome"), registry=registry)
        self._labels = labels
        self._registry = registry
        self._last: dict[str, float] = {}
        self._alerts: _AlertMetrics | None = None  # made when the loop first reports an alert sender

    def observe(self, stats: IncidentLoopStats) -> None:
        counts = stats.counts
        WorkerMetrics._inc_delta(self._last, "alarms", counts.alarms, self.alarms)
        WorkerMetrics._inc_delta(self._last, "events", counts.events, self.events)
        self.open.set(max(0, counts.opened - counts.resolved))
        for kind, value in stats.observed:
            (self.open_s if kind == "open_s" else self.size).observe(value)
        if stats.follow_ups is not None:  # the combined worker, with the model's text on
            for outcome, value in dataclasses.asdict(stats.follow_ups).items():
                WorkerMetrics._inc_delta(self._last, f"follow_ups_{outcome}", value,
                                         self.follow_ups.labels(**self._labels, outcome=outcome))
        if stats.alerts is not None:  # TELESUM_ALERTMANAGER_URL
            if self._alerts is None:
                self._alerts = _AlertMetrics(self._registry, self._labels)
            self._alerts.observe(stats.alerts)


class _AlertMetrics:
    """Incidents as Alertmanager alerts (worker/alerting/): each Alertmanager's outcomes, by `url` (no secrets:
    the settings refuse URLs with a user or password), the sender's queue and drops, the delay of an open."""

    def __init__(self, registry: CollectorRegistry, labels: dict[str, str]) -> None:
        names = tuple(labels)
        self.alerts = Counter("telesum_alertmanager_alerts", "alerts posted to an Alertmanager, by outcome: sent "
                              "(accepted), rejected (refused with a 4xx, not retried), dropped (more than the queue "
                              "size waiting for it)", (*names, "url", "outcome"), registry=registry)
        self.requests = Counter("telesum_alertmanager_requests", "requests to an Alertmanager, by outcome: ok, failed "
                                "(no answer, 5xx or 429: retried with backoff)", (*names, "url", "outcome"),
                                registry=registry)
        self.pending = Gauge("telesum_alertmanager_pending_alerts", "alerts waiting to be posted to an Alertmanager",
                             (*names, "url"), registry=registry)
        self.up = Gauge("telesum_alertmanager_up", "1 when an Alertmanager accepted the last request posted to it",
                        (*names, "url"), registry=registry)
        self.open_s = Histogram("telesum_alertmanager_open_seconds", "an incident's open event acknowledged to its "
                                "alert accepted by an Alertmanager", (*names, "url"), buckets=_SECONDS_BUCKETS,
                                registry=registry)
        self.queued = Gauge("telesum_alertmanager_queued_events", "incident events waiting for the alert sender",
                            names, registry=registry).labels(**labels)
        self.dropped = Counter("telesum_alertmanager_dropped_events", "incident events the alert sender dropped "
                               "because its queue was full", names, registry=registry).labels(**labels)
        self.firing = Gauge("telesum_alertmanager_firing", "open incidents whose alerts are kept firing", names,
                            registry=registry).labels(**labels)
        self._labels = labels
        self._last: dict[str, float] = {}

    def observe(self, stats: AlertStats) -> None:
        inc = WorkerMetrics._inc_delta
        for t in stats.targets:
            for outcome in ("sent", "rejected", "dropped"):
                inc(self._last, f"{t.url} {outcome}", getattr(t, outcome),
                    self.alerts.labels(**self._labels, url=t.url, outcome=outcome))
            inc(self._last, f"{t.url} ok", t.requests_ok, self.requests.labels(**self._labels, url=t.url, outcome="ok"))
            inc(self._last, f"{t.url} failed", t.requests_failed,
                self.requests.labels(**self._labels, url=t.url, outcome="failed"))
            self.pending.labels(**self._labels, url=t.url).set(t.pending)
            self.up.labels(**self._labels, url=t.url).set(1 if t.up else 0)
        for url, seconds in stats.open_delays:
            self.open_s.labels(**self._labels, url=url).observe(seconds)
        self.queued.set(stats.queued)
        inc(self._last, "dropped", stats.dropped_events, self.dropped)
        self.firing.set(stats.firing)
