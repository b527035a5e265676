"""Prometheus metrics of one worker process, labelled by `gpu` (its device index, or "cpu") and `worker`.

Three cheap feeds, all on the poll-loop thread:
  - `observe_loop(worker)`, the KafkaWorker's observer hook after every step: counters as deltas
    of its cumulative WorkerStats, gauges from its queues, consumer and offset tracker;
  - `MeteredSummarizer.poll`: per-record timings and token counts from each Summary;
  - the dispatcher's and engine's counters, sampled at most every `_SAMPLE_INTERVAL_S`.
Exposed over HTTP by `serve(port)`; each process has its own registry and port.
"""

from __future__ import annotations

import os
import time
from collections.abc import Hashable
from typing import Any

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram, start_http_server

from worker.messages import Summary, TelemetryRecord

# The engine's counters sit behind the GPU-loop thread's lock: sample them at most this often.
_SAMPLE_INTERVAL_S = 0.25
# Consumer lag needs a look at every assigned partition's position: once a second is plenty.
_LAG_INTERVAL_S = 1.0
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
}
# dispatcher stats key -> cumulative counter (name, help)
_DISPATCH_COUNTERS = {
    "bins": ("telesum_bins", "packed prefill bins"),
    "tokens_packed": ("telesum_bin_real_tokens", "real tokens packed into bins"),
    "pad_tokens": ("telesum_bin_pad_tokens", "alignment pad tokens in bins"),
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
        self._last_undecodable = 0
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
        self._last_lag = float("-inf")
        self._busy = 0.0
        self._dispatch_counters = {key: counter(*spec) for key, spec in _DISPATCH_COUNTERS.items()}
        self._last_dispatch: dict[str, float] = {}
        self.queued_s = histogram("telesum_queue_seconds", "per record: submit to first prefill", _SECONDS_BUCKETS)
        self.prefill_s = histogram("telesum_prefill_seconds", "per record: prefill time", _SECONDS_BUCKETS)
        self.decode_s = histogram("telesum_decode_seconds", "per record: decode time", _SECONDS_BUCKETS)
        self.record_s = histogram("telesum_record_seconds", "per record: submit to summary", _SECONDS_BUCKETS)
        self.prompt_tokens = counter("telesum_prompt_tokens", "prompt tokens summarised (tokens in)")
        self.output_tokens = counter("telesum_output_tokens", "summary tokens generated (tokens out)")
        self.prompt_size = histogram("telesum_prompt_tokens_per_record", "per record: prompt tokens",
                                     _TOKEN_BUCKETS)
        self.hierarchical = counter("telesum_hierarchical_records", "records summarised hierarchically")
        self.prefix_hit_tokens = counter("telesum_prefix_hit_tokens",
                                         "prompt tokens served from the prefix cache (not prefilled)")
        self.prefix_lookup_tokens = counter("telesum_prefix_lookup_tokens",
                                            "prompt tokens looked up in the prefix cache")
        self.prefix_occupancy = gauge("telesum_prefix_cache_occupancy", "share of the prefix cache's blocks in use")
        self._last_prefix: dict[str, float] = {}
        self._summarizer: Any = None
        self._last_sample = float("-inf")
        self._incidents: _IncidentMetrics | None = None  # made when an incident loop first reports

    def serve(self, port: int, addr: str = "0.0.0.0") -> int:
        """Serve /metrics on `port` (0: any free port) from a daemon thread; returns the bound port."""
        server, _thread = start_http_server(port, addr=addr, registry=self.registry)
        return server.server_port

    def watch_summarizer(self, summarizer, *listeners) -> MeteredSummarizer:
        """Wrap `summarizer` so its results are measured (and passed to each `listener(results)`,
        e.g. the status page); its dispatcher/engine counters are sampled too."""
        self._summarizer = summarizer
        return MeteredSummarizer(summarizer, self, listeners)

    # -- feeds (poll-loop thread) ---------------------------------------------------------
    def observe_loop(self, worker) -> None:
        """The KafkaWorker observer: after every loop step. Only from the loop thread."""
        stats = worker.stats
        for key, child in self._stat_counters.items():
            self._inc_delta(self._last_stats, key, getattr(stats, key), child)
        for reason, count in stats.reasons.items():
            self._inc_delta(self._last_stats, "reason:" + reason, count,
                            self._dead_letters.labels(reason=reason, **self.labels))
        backlog, in_summarizer, unacked = worker.pending
        self.backlog.set(backlog)
        self.in_flight.set(in_summarizer)
        self.unacked.set(unacked)
        self.commit_lag.set(worker.tracker.in_flight())
        self.assigned.set(len(worker.tracker.partitions()))
        self.paused.set(len(worker.consumer.paused()))
        self.stuck.set(len(getattr(worker.consumer, "stuck", ())))
        undecodable = getattr(worker.consumer, "undecodable_batches", 0)
        if undecodable > self._last_undecodable:
            self.undecodable.inc(undecodable - self._last_undecodable)
        self._last_undecodable = undecodable
        now = time.monotonic()
        if self._summarizer is not None and now - self._last_sample >= _SAMPLE_INTERVAL_S:
            elapsed = now - self._last_sample
            self._last_sample = now
            self._sample_summarizer(self._summarizer, elapsed)
        if now - self._last_lag >= _LAG_INTERVAL_S:
            self._last_lag = now
            self._sample_lag(worker)

    def observe_incidents(self, loop) -> None:
        """The incident loop's observer (worker/kafka/incident_loop.py). Only from that loop's thread."""
        if self._incidents is None:
            self._incidents = _IncidentMetrics(self.registry, self.labels)
        self._incidents.observe(loop)

    def _sample_lag(self, worker) -> None:
        client = getattr(worker.consumer, "client", None)
        paused = worker.consumer.paused()
        snapshot: dict[tuple[str, int], dict[str, int | bool | None]] = {}
        for tp in sorted(worker.tracker.partitions()):
            lag = None
            highwater = client.highwater(tp) if client is not None else None
            if highwater is not None:  # known after the first fetch, when the position is too
                position = client.position(tp, timeout_ms=0)
                if position is not None:
                    lag = max(0, highwater - position) + worker.tracker.in_flight(tp)
                    self._lag.labels(topic=tp.topic, partition=str(tp.partition), **self.labels).set(lag)
            snapshot[(tp.topic, tp.partition)] = {"lag": lag, "in_flight": worker.tracker.in_flight(tp),
                                                  "paused": tp in paused}
        for key in set(self.partitions) - set(snapshot):  # revoked: its series would lie
            try:
                self._lag.remove(*self.labels.values(), key[0], str(key[1]))
            except KeyError:
                pass
        self.partitions = snapshot

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

    def _sample_summarizer(self, summarizer, elapsed_s: float) -> None:
        dispatcher = getattr(summarizer, "dispatcher", None)
        if dispatcher is not None:
            stats = dispatcher.stats()
            self.queue_seqs.set(stats.get("queue_seqs", 0.0))
            self.queue_tokens.set(stats.get("queue_tokens", 0.0))
            self.fill_ratio.set(stats.get("fill_ratio", 0.0))
            for key, child in self._dispatch_counters.items():
                if key in stats:
                    self._inc_delta(self._last_dispatch, key, stats[key], child)
        engine = getattr(summarizer, "engine", None)
        if engine is not None:
            active = engine.num_unfinished
            self.engine_active.set(active)
            weight = min(1.0, elapsed_s / _BUSY_WINDOW_S) if elapsed_s != float("inf") else 1.0
            self._busy += weight * ((1.0 if active else 0.0) - self._busy)
            self.engine_busy.set(self._busy)
        prefix = getattr(summarizer, "prefix", None)
        if prefix is not None:
            stats = prefix.stats()
            self._inc_delta(self._last_prefix, "hit_tokens", stats["hit_tokens"], self.prefix_hit_tokens)
            self._inc_delta(self._last_prefix, "lookup_tokens", stats["lookup_tokens"], self.prefix_lookup_tokens)
            self.prefix_occupancy.set(stats["occupancy"])

    @staticmethod
    def _inc_delta(last: dict, key: str, value: float, child) -> None:
        delta = value - last.get(key, 0)
        if delta > 0:
            child.inc(delta)
        last[key] = value


class MeteredSummarizer:
    """The Summarizer's submit/poll interface, measuring each result on its way out."""

    def __init__(self, inner, metrics: WorkerMetrics, listeners=()) -> None:
        self.inner = inner
        self.metrics = metrics
        self.listeners = tuple(listeners)

    @property
    def max_seqs_per_bin(self) -> int:
        return self.inner.max_seqs_per_bin

    def submit(self, request_id: Hashable, record: TelemetryRecord) -> None:
        """As the inner summarizer's `submit` (raises Backpressure when full)."""
        self.inner.submit(request_id, record)

    def poll(self, timeout: float) -> list[tuple[Hashable, Summary | Exception]]:
        """As the inner summarizer's `poll`; every Summary is measured first."""
        results = self.inner.poll(timeout)
        if results:
            self.metrics.observe_results(results)
            for listener in self.listeners:
                listener(results)
        return results


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
        self._last: dict[str, float] = {}

    def observe(self, loop) -> None:
        stats = loop.stats
        WorkerMetrics._inc_delta(self._last, "alarms", stats.alarms, self.alarms)
        WorkerMetrics._inc_delta(self._last, "events", stats.events, self.events)
        self.open.set(max(0, stats.opened - stats.resolved))
        for kind, value in loop.observed:
            (self.open_s if kind == "open_s" else self.size).observe(value)
