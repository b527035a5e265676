"""Concurrency: producers, a consumer and close() in the middle; the GIL is free while waiting."""

from __future__ import annotations

import threading
import time

import numpy as np

from worker.dispatch import Backpressure, DispatcherClosed

from tests.native.helpers import WAIT_S, check_bin, copy_bin


def test_dispatcher_producers_consumer_close_midway_loses_nothing(make_dispatcher) -> None:
    budget, alignment = 2048, 16
    # A small queue so producers hit backpressure and the packer runs many rounds.
    d = make_dispatcher(budget, alignment=alignment, num_slots=2, queue_capacity_tokens=2 * budget,
                        latency_cap_s=0.002)
    accepted: dict[int, np.ndarray] = {}
    lock = threading.Lock()
    closed_midway = threading.Event()

    def produce(worker: int) -> None:
        rng = np.random.default_rng(worker)
        for i in range(400):
            sid = worker * 10_000 + i
            toks = rng.integers(0, 30_000, int(rng.integers(1, 700)), dtype=np.int32)
            while True:
                try:
                    d.submit(sid, toks, 8)
                except Backpressure:
                    d.wait_for_room(len(toks), 0.05)
                    continue
                except DispatcherClosed:
                    return
                with lock:
                    accepted[sid] = toks
                break
            if worker == 0 and i == 200:
                d.close()
                closed_midway.set()

    bins: list[dict] = []

    def consume() -> None:
        while True:
            try:
                b = d.next_bin(WAIT_S)
            except DispatcherClosed:
                return
            assert b is not None, "consumer timed out: lost wake-up"
            bins.append(copy_bin(b))
            d.release(b.slot)

    producers = [threading.Thread(target=produce, args=(w,)) for w in range(4)]
    consumer = threading.Thread(target=consume)
    for t in producers + [consumer]:
        t.start()
    for t in producers + [consumer]:
        t.join(timeout=60)
        assert not t.is_alive(), "deadlock: a thread did not finish"
    assert closed_midway.is_set()
    seen = [sid for b in bins for sid in b["seq_ids"].tolist()]
    assert len(seen) == len(set(seen))
    assert set(seen) == set(accepted)
    for b in bins:
        check_bin(b, accepted, token_budget=budget, alignment=alignment)


def test_dispatcher_next_bin_waiting_lets_python_thread_run(make_dispatcher) -> None:
    d = make_dispatcher(256)
    ticks = 0
    stop = threading.Event()

    def spin() -> None:
        nonlocal ticks
        while not stop.is_set():
            ticks += 1

    t = threading.Thread(target=spin)
    t.start()
    try:
        assert d.next_bin(0.3) is None  # nothing submitted: times out with the GIL released
    finally:
        stop.set()
        t.join()
    assert ticks > 1000


def test_dispatcher_close_wakes_blocked_next_bin(make_dispatcher) -> None:
    d = make_dispatcher(256)
    result: list[BaseException] = []

    def wait() -> None:
        try:
            d.next_bin(None)
        except DispatcherClosed as e:
            result.append(e)

    t = threading.Thread(target=wait)
    t.start()
    time.sleep(0.05)
    d.close()
    t.join(timeout=WAIT_S)
    assert not t.is_alive() and len(result) == 1
