"""A deterministic test double with the Summarizer's submit/poll interface, for offset and
rebalance logic only (the integration tests use the real Summarizer)."""

from __future__ import annotations

import threading
import time

from worker.dispatch import Backpressure
from worker.messages import Summary


# Records a KafkaWorker keeps inside a test double (the worker command passes two full bins').
FAKE_IN_FLIGHT = 256


class GatedSummarizer:
    """Holds at most `capacity` requests (Backpressure beyond); answers them only while `gate` is set."""

    def __init__(self, capacity: int = 1000, open_gate: bool = True) -> None:
        self.capacity = capacity
        self.gate = threading.Event()
        if open_gate:
            self.gate.set()
        self._held: list = []
        self.backpressure_raised = 0

    def submit(self, request_id, record) -> None:
        if len(self._held) >= self.capacity:
            self.backpressure_raised += 1
            raise Backpressure("full")
        self._held.append((request_id, record))

    def poll(self, timeout: float):
        if not self.gate.wait(timeout):
            return []
        done, self._held = self._held, []
        return [(rid, Summary(id=rec.id, summary=f"summary of {rec.id}", model="fake", prompt_tokens=1,
                              output_tokens=1)) for rid, rec in done]


def run_in_thread(worker, stop: threading.Event) -> threading.Thread:
    thread = threading.Thread(target=worker.run, args=(stop,), daemon=True)
    thread.start()
    return thread


def run_capturing(worker, stop: threading.Event) -> tuple[threading.Thread, list]:
    """`worker.run(stop)` on a thread; what it raised lands in the returned list (for the test to assert)."""
    raised: list = []

    def target() -> None:
        try:
            worker.run(stop)
        except BaseException as exc:  # noqa: BLE001 - handed to the test
            raised.append(exc)

    thread = threading.Thread(target=target, daemon=True)
    thread.start()
    return thread, raised


def wait_for(predicate, wait_s: float = 60) -> None:
    deadline = time.monotonic() + wait_s
    while not predicate():
        if time.monotonic() > deadline:
            raise AssertionError("condition not reached")
        time.sleep(0.05)
