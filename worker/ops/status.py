"""What the live status page shows, as one JSON-ready snapshot.

Fed from the poll-loop thread by the observer (`observe_loop`, `observe_results`), read by the HTTP
threads (`snapshot`). Everything taken from records (ids, summaries, facts, dead-letter reasons) is data
here, never markup: the page inserts it with `textContent` only.
"""

from __future__ import annotations

import collections
import dataclasses
import threading
import time
from collections.abc import Callable, Hashable
from typing import TYPE_CHECKING

import msgspec

from worker.control_chars import clean_text
from worker.messages import Summary

if TYPE_CHECKING:  # the loops' snapshot types live above this layer
    from worker.kafka.incident_loop import IncidentLoopStats
    from worker.kafka.loop import LoopStats

# The page shows this many of the latest summaries.
LATEST = 20
# records/s is measured over about this window (long enough for bursts of slow CPU batches).
_RATE_WINDOW_S = 30.0
_SUMMARY_CHARS = 2000  # a summary is short; a runaway one is cut on the page, not in the topic


class StatusBoard:
    """Thread-safe: feeds from the loop thread, snapshots from any thread."""

    def __init__(self, metrics, about: dict, settings_rows: list[dict],
                 readiness: Callable[[], tuple[bool, dict]] | None = None) -> None:
        self.metrics = metrics
        self.about = dict(about)              # worker, model, device, backend, budgets: fixed at start
        self.settings_rows = settings_rows    # effective settings, secrets already masked
        self.readiness = readiness
        self.started = time.time()
        self._lock = threading.Lock()  # protects _latest, _answered, _stats
        self._latest: collections.deque[dict] = collections.deque(maxlen=LATEST)
        self._answered: collections.deque[tuple[float, int]] = collections.deque()  # (t, summaries + dlq)
        self._stats: dict = {}
        self._incidents: list[dict] | None = None  # open incidents, when the incident loop runs
        self._alerting: dict | None = None          # the Alertmanager panel, when alerts are on

    def observe_loop(self, stats: LoopStats) -> None:
        """A KafkaWorker's `stats()`. Only from the loop thread."""
        s = stats.counts
        now = time.monotonic()
        with self._lock:
            self._stats = {"consumed": s.consumed, "summaries": s.summaries, "dead_letters": s.dead_letters,
                           "commits": s.commits, "reasons": dict(s.reasons),
                           "in_flight": stats.in_summarizer, "backlog": stats.backlog}
            answered = s.summaries + s.dead_letters
            if not self._answered or self._answered[-1][1] != answered or now - self._answered[-1][0] > 1.0:
                self._answered.append((now, answered))
            while len(self._answered) > 2 and now - self._answered[1][0] > _RATE_WINDOW_S:
                self._answered.popleft()

    def observe_incidents(self, stats: IncidentLoopStats) -> None:
        """The incident loop's `stats()`: its open incidents (the loop's own view). Only from its thread."""
        rows = [{"incident_id": e.incident_id, "summary": clean_text(e.summary[:_SUMMARY_CHARS]),
                 "root_cause": f"{clean_text(e.root_cause.alarm_type)} on {clean_text(e.root_cause.element)}",
                 "alarms": e.alarms, "elements": len(e.elements), "first_time": e.first_time, "last_time": e.last_time}
                for e in sorted(stats.open_incidents, key=lambda e: -e.alarms)[:LATEST]]
        alerts = stats.alerts
        alerting = None if alerts is None else {
            "firing": alerts.firing, "queued": alerts.queued, "dropped_events": alerts.dropped_events,
            "targets": [{**dataclasses.asdict(t), "last_error": clean_text(t.last_error or "")[:_SUMMARY_CHARS]}
                        for t in alerts.targets]}
        with self._lock:
            self._incidents = rows
            self._alerting = alerting

    def observe_results(self, results: list[tuple[Hashable, Summary | Exception]]) -> None:
        """Finished summaries. Only from the loop thread."""
        rows = [_summary_row(r) for _, r in results if isinstance(r, Summary)]
        with self._lock:
            self._latest.extendleft(rows)

    def snapshot(self) -> dict:
        now = time.monotonic()
        with self._lock:
            stats = dict(self._stats)
            latest = list(self._latest)
            incidents = self._incidents
            alerting = self._alerting
            rate = 0.0
            if len(self._answered) >= 2:
                (t0, n0), (t1, n1) = self._answered[0], self._answered[-1]
                span = max(now - t0, t1 - t0)
                rate = (n1 - n0) / span if span > 0 else 0.0
        registry, labels = self.metrics.registry, self.metrics.labels
        gauge = lambda name: registry.get_sample_value(name, labels)  # noqa: E731
        partitions = [{"topic": topic, "partition": partition, **state}
                      for (topic, partition), state in sorted(self.metrics.partitions.items())]
        out = {"about": self.about, "uptime_s": round(time.time() - self.started, 1),
               "records_per_s": round(rate, 2), "stats": stats,
               "engine": {"bin_fill_ratio": gauge("telesum_bin_fill_ratio"),
                          "engine_busy_ratio": gauge("telesum_engine_busy_ratio"),
                          "engine_sequences": gauge("telesum_engine_sequences"),
                          "queue_tokens": gauge("telesum_summarizer_queue_tokens"),
                          "bins": registry.get_sample_value("telesum_bins_total", labels)},
               "partitions": partitions, "dead_letters": stats.get("reasons", {}), "latest": latest,
               "settings": self.settings_rows}
        if incidents is not None:
            out["open_incidents"] = incidents
        if alerting is not None:
            out["alerting"] = alerting
        if self.readiness is not None:
            out["ready"] = self.readiness()[1]
        return out

    def snapshot_json(self) -> bytes:
        return msgspec.json.encode(self.snapshot())


def _clean(value):
    """Strings of a row without escape sequences or control characters (a VES field may carry them)."""
    if isinstance(value, str):
        return clean_text(value)
    if isinstance(value, dict):
        return {k: _clean(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_clean(v) for v in value]
    return value


def _summary_row(s: Summary) -> dict:
    return {"id": clean_text(s.id), "summary": clean_text(s.summary[:_SUMMARY_CHARS]), "model": s.model,
            "facts": _clean(msgspec.to_builtins(s.facts)) if s.facts is not None else None,
            "prompt_tokens": s.prompt_tokens, "output_tokens": s.output_tokens,
            "hierarchical": s.hierarchical, "total_s": round(s.timings.total_s, 3) if s.timings else None,
            "at": time.strftime("%H:%M:%S")}
