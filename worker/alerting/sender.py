"""Incident events to Alertmanager alerts, from a bounded queue, on threads of their own.

The incident loop hands over each acknowledged event (`submit`) and, every `resync_s` and after a
rebalance, the open incidents of its rooms (`sync`); neither call ever blocks nor wakes a thread: a full
queue drops the item, counted and logged. The sender thread (`telesum-alerts`) takes what was handed over
every 20 ms (an incident's events of one round: its latest only) and keeps one alert per open incident:

  1. an `open` or `update` fires the incident's alert (an older event than one already taken is ignored);
     a root cause or severity that changed the alert's labels resolves the alert under the old ones;
  2. a `resolve` (also `merged_into`) resolves it and forgets the incident;
  3. a `sync` is the whole set of open incidents: those it lists fire again (re-posted before their
     `endsAt`, see alerts.py), those it lacks are no longer this worker's (revoked, or resolved by an
     event still to come) and are forgotten without a resolve.

Each Alertmanager (an HA pair: every one gets every alert) has a target thread (`telesum-alerts-N`)
with its own pending alerts (the latest per label set, at most queue_size), posting them in batches
and, after a failure, again with a backoff doubling from 0.5 s to 30 s; one Alertmanager that is down
or slow never holds back another, nor the incident loop. When a target gets through after failing, every
open incident is posted to it again (a restarted Alertmanager has forgotten its alerts).
"""

from __future__ import annotations

import collections
import dataclasses
import logging
import threading
import time
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from datetime import datetime, timezone

import msgspec

from worker.alerting.alerts import Labels, annotations_of, labels_of, parse_time, postable
from worker.alerting.client import AlertmanagerClient, PostError
from worker.messages import IncidentEvent
from worker.settings.alerting import AlertingSettings

log = logging.getLogger(__name__)

# Alerts per request, at most (a resync of many open incidents goes in several).
MAX_BATCH = 256
# Retry after a failed request: doubling from the first to the cap. A restarting Alertmanager is back in
# seconds; 30 s keeps an outage's catch-up well inside the default 60 s resend interval.
FIRST_BACKOFF_S = 0.5
MAX_BACKOFF_S = 30.0
# Repeated failures and drops are logged at most this often (per target, or per kind of drop).
_LOG_EVERY_S = 30.0
# Delays of opens measured and not yet read by stats(), at most (the observer reads them every loop step).
_DELAYS_KEPT = 10_000
# The sender thread takes what the loop handed over this often: an alert waits at most this long more,
# and the loop's hand-over never wakes a thread (20 ms: 50 idle wake-ups a second, under 1 ms of CPU).
_TAKE_EVERY_S = 0.02
# On close, pending alerts (resolves, mostly) get this long at most to go out.
CLOSE_TIMEOUT_S = 5.0


@dataclass(slots=True)
class _Alert:
    """One alert as the targets post it, never changed once made (slotted, not frozen: made per event, and
    a frozen dataclass costs more to make). Its annotations and endsAt are written when it is posted (most
    events of a busy incident are replaced by the next before they are; firing: endsAt resend-based)."""

    labels: Labels
    event: IncidentEvent
    model_summary: str | None
    starts_at: datetime
    ends_at: datetime | None            # None: firing
    opened_at: float | None = None      # monotonic time its `open` was handed over: its delay is measured


@dataclass(slots=True)
class _Incident:
    """What the sender thread keeps of an open incident."""

    labels: Labels
    alert: _Alert
    sequence: int
    model_summary: str | None


@dataclass(frozen=True)
class TargetStats:
    """One Alertmanager's outcomes since start."""

    url: str                     # redacted: scheme://host:port/prefix
    sent: int                    # alerts it accepted
    requests_ok: int
    requests_failed: int         # no answer, 5xx or 429: retried with backoff
    rejected: int                # alerts in requests refused with another 4xx: not retried
    dropped: int                 # alerts given up: more than queue_size waiting for it
    pending: int                 # alerts waiting for it now
    last_ok: float | None        # wall time of its last accepted request
    last_error: str | None
    up: bool                     # its last request was accepted (True before the first)


@dataclass(frozen=True)
class AlertStats:
    """The sender's state, read at one moment (`AlertSender.stats()`)."""

    targets: tuple[TargetStats, ...]
    queued: int                  # events and syncs waiting for the sender thread
    dropped_events: int          # events (and syncs) dropped because the queue was full
    firing: int                  # open incidents whose alerts are kept firing
    open_delays: tuple[tuple[str, float], ...]  # since the previous stats(): (url, open handed over -> accepted)


class _Target:
    """One Alertmanager: its pending alerts and the thread that posts them. put/stats from any thread."""

    def __init__(self, client: AlertmanagerClient, bound: int, resend_s: float, index: int,
                 on_recovered: Callable[[_Target], None]) -> None:
        self.client = client
        self.url = client.url
        self.bound = bound
        self.resend_s = resend_s
        self.on_recovered = on_recovered
        self._cond = threading.Condition()  # protects every field below
        self._pending: dict[Labels, _Alert] = {}  # the latest alert per label set, oldest first
        self._next_try = 0.0
        self._backoff = 0.0
        self._closing_at: float | None = None      # close(): post until this monotonic time
        self._counts = collections.Counter()
        self._delays: list[float] = []
        self._last_ok: float | None = None
        self._last_error: str | None = None
        self._logged = float("-inf")
        self._thread = threading.Thread(target=self._run, name=f"telesum-alerts-{index}", daemon=True)

    def start(self) -> None:
        self._thread.start()

    def put(self, alerts: Iterable[_Alert]) -> None:
        """Newer alerts replace pending ones of the same labels; beyond the bound the oldest go. Never blocks
        for long (a lock held only for dict updates)."""
        with self._cond:
            for alert in alerts:
                old = self._pending.pop(alert.labels, None)
                if old is not None and old.opened_at is not None and alert.opened_at is None:
                    alert = dataclasses.replace(alert, opened_at=old.opened_at)  # its open's delay still counts
                self._pending[alert.labels] = alert
            over = len(self._pending) - self.bound
            if over > 0:
                for labels in list(self._pending)[:over]:
                    del self._pending[labels]
                self._counts["dropped"] += over
                if time.monotonic() - self._logged >= _LOG_EVERY_S:
                    self._logged = time.monotonic()
                    log.warning("alerts: %s: %d alerts dropped, more than %d waiting (%d dropped in all)",
                                self.url, over, self.bound, self._counts["dropped"])
            if time.monotonic() >= self._next_try:  # in a backoff the thread wakes when it ends, not per alert
                self._cond.notify()

    def close(self, deadline: float) -> None:
        with self._cond:
            self._closing_at = deadline
            self._cond.notify()

    def join(self, timeout_s: float) -> None:
        self._thread.join(timeout_s)

    def stats(self) -> tuple[TargetStats, list[float]]:
        with self._cond:
            delays, self._delays = self._delays, []
            c = self._counts
            return TargetStats(self.url, c["sent"], c["ok"], c["failed"], c["rejected"], c["dropped"],
                               len(self._pending), self._last_ok, self._last_error, self._backoff == 0), delays

    def _run(self) -> None:
        while True:
            with self._cond:
                while True:
                    now = time.monotonic()
                    if self._closing_at is not None and (not self._pending or now >= self._closing_at):
                        self.client.close()
                        return
                    if self._pending and now >= self._next_try:
                        break
                    wait = None if not self._pending else self._next_try - now
                    if self._closing_at is not None:
                        wait = min(wait if wait is not None else self._closing_at - now, self._closing_at - now)
                    self._cond.wait(wait)
                batch = list(self._pending.values())[:MAX_BATCH]
            self._post(batch)

    def _post(self, batch: list[_Alert]) -> None:
        now = datetime.now(timezone.utc)
        body = msgspec.json.encode([postable(a.labels, annotations_of(a.event, a.model_summary), a.starts_at,
                                             a.ends_at, now, self.resend_s) for a in batch])
        try:
            self.client.post(body)
        except PostError as exc:
            self._failed(batch, exc)
            return
        done = time.monotonic()
        with self._cond:
            recovered = self._backoff > 0
            self._backoff, self._next_try = 0.0, 0.0
            self._counts["ok"] += 1
            self._counts["sent"] += len(batch)
            self._last_ok = time.time()
            self._forget_locked(batch)
            self._delays += [done - a.opened_at for a in batch if a.opened_at is not None]
            del self._delays[:-_DELAYS_KEPT]  # nobody reading stats(): keep the latest only
        if recovered:
            log.info("alerts: %s accepts alerts again; posting every open incident to it", self.url)
            self.on_recovered(self)

    def _failed(self, batch: list[_Alert], exc: PostError) -> None:
        with self._cond:
            self._last_error = str(exc)
            if exc.retry:
                self._counts["failed"] += 1
                self._backoff = min(MAX_BACKOFF_S, max(FIRST_BACKOFF_S, 2 * self._backoff))
                self._next_try = time.monotonic() + self._backoff
                what = f"again in {self._backoff:.1f} s ({len(self._pending)} alerts waiting)"
            else:  # the same alerts would be refused again
                self._counts["rejected"] += len(batch)
                self._forget_locked(batch)
                what = f"{len(batch)} alerts dropped"
            if time.monotonic() - self._logged >= _LOG_EVERY_S or not exc.retry:
                self._logged = time.monotonic()
                log.warning("alerts: %s: %s; %s (failed requests: %d, rejected alerts: %d)", self.url, exc, what,
                            self._counts["failed"], self._counts["rejected"])

    def _forget_locked(self, batch: list[_Alert]) -> None:
        for alert in batch:
            if self._pending.get(alert.labels) is alert:  # not replaced by a newer one meanwhile
                del self._pending[alert.labels]


class AlertSender:
    """Incidents to Alertmanager. `submit`/`sync` from the incident loop's thread; `stats` from any thread."""

    def __init__(self, settings: AlertingSettings, clients: Sequence[AlertmanagerClient] | None = None) -> None:
        self.settings = settings
        self.resync_s = settings.resend_s   # how often the loop hands over its open incidents
        self._static = settings.static_labels()
        clients = clients if clients is not None else [AlertmanagerClient(u, settings) for u in settings.urls()]
        self._targets = [_Target(c, settings.queue_size, settings.resend_s, i, self._recovered)
                         for i, c in enumerate(clients)]
        # Items from the loop (and the targets' "recovered"): deque appends and pops are atomic, so handing one
        # over takes no lock and wakes no thread; the sender thread takes them every _TAKE_EVERY_S.
        self._items: collections.deque = collections.deque()
        self._closing = threading.Event()
        self._dropped = 0          # written by the submitting threads only
        self._logged_drop = float("-inf")
        self._firing = 0           # written by the sender thread only
        self._incidents: dict[str, _Incident] = {}  # only the sender thread
        self._out: list[_Alert] = []                 # only the sender thread: this round's alerts
        self._thread = threading.Thread(target=self._run, name="telesum-alerts", daemon=True)
        self._started = False

    @property
    def urls(self) -> tuple[str, ...]:
        return tuple(t.url for t in self._targets)

    def start(self) -> None:
        """Start the threads (idempotent). No request is made until there is an alert."""
        if not self._started:
            self._started = True
            self._thread.start()
            for target in self._targets:
                target.start()

    def submit(self, event: IncidentEvent) -> bool:
        """Hand over an acknowledged incident event. Never blocks; False: dropped (queue full)."""
        return self._put(("event", time.monotonic(), event))

    def sync(self, open_incidents: Iterable[IncidentEvent]) -> bool:
        """Hand over the open incidents of every room this loop holds (`room.open_incidents()`): they fire
        again, any others are forgotten. Never blocks; False: dropped (queue full)."""
        return self._put(("sync", time.monotonic(), tuple(open_incidents)))

    def _put(self, item) -> bool:
        if len(self._items) < self.settings.queue_size:
            self._items.append(item)
            return True
        else:
            self._dropped += 1
            if time.monotonic() - self._logged_drop >= _LOG_EVERY_S:
                self._logged_drop = time.monotonic()
                log.warning("alerts: the sender's queue is full (%d): an incident %s dropped (%d dropped in all)",
                            self.settings.queue_size, item[0], self._dropped)
            return False

    def close(self, timeout_s: float = CLOSE_TIMEOUT_S) -> None:
        """Take what is queued, post what is pending for up to `timeout_s`, stop. Open incidents' alerts
        stay firing until their endsAt: whoever serves the partitions next posts them again."""
        if not self._started:
            return
        deadline = time.monotonic() + timeout_s
        self._closing.set()
        self._thread.join(max(0.0, deadline - time.monotonic()))
        for target in self._targets:
            target.close(deadline)
        for target in self._targets:
            target.join(max(0.0, deadline - time.monotonic()) + 0.5)
        left = sum(t.stats()[0].pending for t in self._targets)
        if left:
            log.warning("alerts: closed with %d alerts not delivered", left)

    def stats(self) -> AlertStats:
        """Counters since start; `open_delays` are those measured since the previous call (one reader)."""
        targets, delays = [], []
        for target in self._targets:
            stats, measured = target.stats()
            targets.append(stats)
            delays += [(target.url, d) for d in measured]
        return AlertStats(tuple(targets), len(self._items), self._dropped, self._firing, tuple(delays))

    # -- the sender thread -----------------------------------------------------------------
    def _run(self) -> None:
        """Every _TAKE_EVERY_S: take every item handed over, then give each target its alerts in one put. An
        incident's events of one round make one alert, from the latest (a backlog brings many per round)."""
        while True:
            closing = self._closing.wait(_TAKE_EVERY_S)
            self._out = []
            # incident id -> (its latest event this round, when its open was handed over, the model's text)
            latest: dict[str, tuple[IncidentEvent, float | None, str | None]] = {}
            while self._items:
                kind, at, payload = self._items.popleft()
                if kind == "event":
                    before = latest.get(payload.incident_id)
                    opened_at = at if payload.event == "open" else before[1] if before is not None else None
                    text = payload.model_summary or (before[2] if before is not None else None)
                    latest[payload.incident_id] = (payload, opened_at, text)
                    continue
                for event, opened_at, text in latest.values():  # what came before it first
                    self._event(event, opened_at, text)
                latest = {}
                self._take(kind, payload)
            for event, opened_at, text in latest.values():
                self._event(event, opened_at, text)
            self._firing = len(self._incidents)
            if self._out:
                for target in self._targets:
                    target.put(self._out)
            if closing:
                return

    def _take(self, kind: str, payload) -> None:
        if kind == "sync":
            self._sync(payload)
        elif kind == "recovered":
            payload.put([i.alert for i in self._incidents.values()])

    def _broadcast(self, alerts: list[_Alert]) -> None:
        self._out += alerts  # to every target at the end of this round

    def _recovered(self, target: _Target) -> None:
        """A target's thread: it gets through again. Its re-post is made on the sender thread."""
        self._put(("recovered", time.monotonic(), target))

    def _event(self, event: IncidentEvent, opened_at: float | None, model_summary: str | None) -> None:
        known = self._incidents.get(event.incident_id)
        if event.event == "resolve":
            now = datetime.now(timezone.utc)
            labels = known.labels if known is not None else labels_of(event, self.settings.severity, self._static)
            summary = model_summary or (known.model_summary if known is not None else None)
            self._incidents.pop(event.incident_id, None)
            self._broadcast([_Alert(labels, event, summary, parse_time(event.first_time),
                                    min(parse_time(event.time), now))])
            return
        if known is not None and event.sequence < known.sequence:
            return  # a view taken after this event was acknowledged already said more
        self._broadcast(self._fire(event, known, opened_at, model_summary))

    def _sync(self, views: tuple[IncidentEvent, ...]) -> None:
        alerts: list[_Alert] = []
        seen = set()
        for view in views:
            seen.add(view.incident_id)
            known = self._incidents.get(view.incident_id)
            if known is not None and view.sequence < known.sequence:
                alerts.append(known.alert)
                continue
            alerts += self._fire(view, known, None, None)
        for incident_id in set(self._incidents) - seen:
            del self._incidents[incident_id]
        self._broadcast(alerts)

    def _fire(self, event: IncidentEvent, known: _Incident | None, opened_at: float | None,
              model_summary: str | None) -> list[_Alert]:
        """The incident's firing alert from `event`, kept; and, when its labels changed, the old alert resolved."""
        labels = labels_of(event, self.settings.severity, self._static)
        model_summary = model_summary or event.model_summary or (known.model_summary if known is not None else None)
        same_start = known is not None and known.alert.event.first_time == event.first_time
        starts_at = known.alert.starts_at if same_start else parse_time(event.first_time)
        alert = _Alert(labels, event, model_summary, starts_at, None, opened_at)
        out = [alert]
        if known is not None and known.labels != labels:
            out.insert(0, dataclasses.replace(known.alert, ends_at=datetime.now(timezone.utc), opened_at=None))
        sequence = max(event.sequence, known.sequence if known is not None else 0)
        kept = dataclasses.replace(alert, opened_at=None)  # re-posts of it measure nothing
        self._incidents[event.incident_id] = _Incident(labels, kept, sequence, model_summary)
        return out
