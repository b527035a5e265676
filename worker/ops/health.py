"""Liveness and readiness of one worker process, for /healthz and /readyz.

Ready: the model is loaded, the member holds partitions in a settled group, a bootstrap broker
accepts a connection, no drain has begun, and no partition is stuck at a batch it cannot decode
(each stuck one is listed: topic, partition, offset, reason). Alive: the process answers and, once the poll loop
has started, it stepped within the group's max poll interval (past that the group drops it anyway).
The loop thread writes (`observe`, from the observer); the HTTP threads read.
"""

from __future__ import annotations

import socket
import threading
import time
from collections.abc import Callable
from typing import TYPE_CHECKING

if TYPE_CHECKING:  # the consumer's facts are read in worker/kafka, above this layer
    from worker.kafka.loop import ConsumerStats

# A broker check's result is reused this long: probes come every few seconds from several places.
_BROKER_CHECK_TTL_S = 2.0
_BROKER_CONNECT_TIMEOUT_S = 1.0


def tcp_reachable(bootstrap_servers: str, timeout_s: float = _BROKER_CONNECT_TIMEOUT_S) -> bool:
    """True when any of the comma-separated host:port accepts a TCP connection."""
    for entry in bootstrap_servers.split(","):
        host, _, port = entry.strip().rpartition(":")
        try:
            with socket.create_connection((host.strip("[]") or "localhost", int(port)), timeout=timeout_s):
                return True
        except (OSError, ValueError):
            continue
    return False


class Health:
    """Thread-safe state behind /healthz and /readyz."""

    def __init__(self, broker_check: Callable[[], bool], stall_after_s: float,
                 draining: Callable[[], bool] = lambda: False) -> None:
        self._broker_check = broker_check
        self._stall_after_s = stall_after_s
        self._draining = draining
        self._lock = threading.Lock()  # protects every field below
        self._model_loaded = False
        self._assigned = 0
        self._stable = False
        self._last_step: float | None = None
        self._stuck: list[dict] = []  # partitions paused at an undecodable batch
        self._broker: tuple[float, bool] | None = None  # (checked at, reachable)

    def set_model_loaded(self) -> None:
        with self._lock:
            self._model_loaded = True

    def observe(self, assigned: int, consumer: ConsumerStats) -> None:
        """A loop stepped: it holds `assigned` partitions, its consumer is as `consumer` says. Only from
        that loop's thread."""
        with self._lock:
            self._assigned, self._stable, self._last_step = assigned, consumer.stable, time.monotonic()
            self._stuck = list(consumer.stuck)

    def liveness(self) -> tuple[bool, dict]:
        with self._lock:
            last = self._last_step
        stalled_s = None if last is None else time.monotonic() - last
        alive = stalled_s is None or stalled_s <= self._stall_after_s
        return alive, {"alive": alive, "loop_started": last is not None,
                       "since_last_loop_step_s": None if stalled_s is None else round(stalled_s, 3)}

    def readiness(self) -> tuple[bool, dict]:
        with self._lock:
            model, assigned, stable, stuck = self._model_loaded, self._assigned, self._stable, self._stuck
        checks = {"model_loaded": model, "partitions_assigned": assigned > 0 and stable,
                  "broker_reachable": self._broker_reachable(), "not_draining": not self._draining(),
                  "no_stuck_partitions": not stuck}
        ready = all(checks.values())
        return ready, {"ready": ready, "checks": checks, "assigned_partitions": assigned, "stuck_partitions": stuck}

    def _broker_reachable(self) -> bool:
        now = time.monotonic()
        with self._lock:
            cached = self._broker
        if cached is not None and now - cached[0] < _BROKER_CHECK_TTL_S:
            return cached[1]
        reachable = self._broker_check()  # outside the lock: a connect may take up to its timeout
        with self._lock:
            self._broker = (time.monotonic(), reachable)
        return reachable
