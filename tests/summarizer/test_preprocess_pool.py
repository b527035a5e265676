"""The preprocessing pool starts all its processes at once, without holding up its caller, whose first
records it prepares in place until the processes are up."""

from __future__ import annotations

import os
import time

import pytest

from worker.messages import TelemetryRecord
from worker.summarizer import preprocess
from worker.summarizer.preprocess import Preprocessor, prepare

from tests.engine.tiny_tokenizer import tiny_tokenizer

GATE_WAIT_S = 10


class GatedTokenizer:
    """A tokenizer stand-in as large as a real one's pickle. Unpickled in a pool process, it waits (up
    to GATE_WAIT_S) for the file `gate` and notes whether it appeared. The wait comes before the
    pickle's megabytes are read, as a real tokenizer's import of transformers does."""

    def __init__(self, gate: str) -> None:
        self.gate = gate
        self.padding = b"x" * (4 << 20)  # far beyond a pipe's buffer
        self.gate_was_open = True

    def __reduce__(self):
        return _wait_for_gate, (self.gate,), {"padding": self.padding}


def _wait_for_gate(gate: str) -> GatedTokenizer:
    deadline = time.monotonic() + GATE_WAIT_S
    while not os.path.exists(gate) and time.monotonic() < deadline:
        time.sleep(0.01)
    tokenizer = GatedTokenizer.__new__(GatedTokenizer)
    tokenizer.gate, tokenizer.gate_was_open = gate, os.path.exists(gate)
    return tokenizer


class GatedRealTokenizer:
    """A working tokenizer whose copy in a pool process becomes usable only once the file `gate` exists."""

    def __init__(self, tokenizer, gate: str) -> None:
        self.tokenizer, self.gate = tokenizer, gate

    def __getattr__(self, name):
        return getattr(self.__dict__["tokenizer"], name)

    def __call__(self, *args, **kwargs):
        return self.tokenizer(*args, **kwargs)

    def __reduce__(self):
        return _real_after_gate, (self.tokenizer, self.gate)


def _real_after_gate(tokenizer, gate: str):
    deadline = time.monotonic() + GATE_WAIT_S
    while not os.path.exists(gate) and time.monotonic() < deadline:
        time.sleep(0.01)
    return tokenizer


def _gate_was_open() -> bool:
    return preprocess._worker_heads.tokenizer.gate_was_open


def test_pool_constructor_returns_before_its_processes_load_the_tokenizer(tmp_path):
    gate = tmp_path / "gate"
    pool = Preprocessor(GatedTokenizer(str(gate)), workers=2)
    try:
        # Returned while no process could have loaded its tokenizer: the gate opens only now.
        gate.touch()
        pids = {f.result(timeout=120) for f in pool.started}
        assert len(pids) == 2  # both processes spawned by the constructor, each answered once
        seen = [pool._pool.submit(_gate_was_open).result(timeout=120) for _ in range(4)]
        assert all(seen), "a pool process loaded its tokenizer while the constructor still ran"
    finally:
        pool.close()


def test_pool_close_removes_the_tokenizer_file(tmp_path):
    pool = Preprocessor(GatedTokenizer(str(tmp_path / "gate")), workers=1)
    (tmp_path / "gate").touch()
    pool.started[0].result(timeout=120)
    folder = pool._tokenizer_dir.name
    assert os.path.isdir(folder)
    pool.close()
    assert not os.path.exists(folder)


def test_pool_closed_while_its_processes_start_lets_them_exit_quietly(tmp_path, capfd):
    gate = tmp_path / "gate"
    pool = Preprocessor(GatedTokenizer(str(gate)), workers=2)
    processes = list(pool._pool._processes.values())
    assert len(processes) == 2
    pool.close()  # before either process has read its tokenizer (a start-up that failed after the spawn)
    assert pool_waits_no_more(pool)
    gate.touch()
    for process in processes:
        assert _exits(process.pid, within_s=60), "a pool process still waits for the others after close"
    assert "Traceback" not in capfd.readouterr().err  # the operator sees the start-up's error alone


def _exits(pid: int, within_s: float) -> bool:
    """Whether the process ends (or is a zombie) within the time; the executor's own thread may reap
    it first, which leaves Process.is_alive() unable to tell."""
    deadline = time.monotonic() + within_s
    while time.monotonic() < deadline:
        try:
            state = open(f"/proc/{pid}/stat").read().rsplit(")", 1)[1].split()[0]
        except FileNotFoundError:
            return True
        if state == "Z":
            return True
        time.sleep(0.05)
    return False


def pool_waits_no_more(pool: Preprocessor) -> bool:
    """A process already waiting in the start-up barrier returns at once (one whose fellow never
    runs its start-up task, cancelled by the close, would otherwise wait _START_WAIT_S)."""
    return pool._all_started.broken


def test_records_before_the_pool_is_up_are_prepared_on_the_callers_thread_up_to_a_bound(tmp_path, monkeypatch):
    monkeypatch.setattr(preprocess, "PREPARED_WHILE_STARTING", 3)
    tokenizer, gate = tiny_tokenizer(), tmp_path / "gate"
    records = [TelemetryRecord(id=f"r{i}", kind="syslog", source="enb-7",
                               body=f"<11>1 2026-11-29T10:00:0{i}Z cell{i} ran - - - link down on port {i}")
               for i in range(6)]
    want = [prepare(r, tokenizer).prompt.tolist() for r in records]
    pool = Preprocessor(GatedRealTokenizer(tokenizer, str(gate)), workers=1)
    try:
        early = [pool.submit(r) for r in records[:5]]  # the gate is shut: no process can be up
        assert [f.done() for f in early] == [True, True, True, False, False]  # the bound: the rest wait
        assert pool.prepared_while_starting == 3
        gate.touch()
        assert [f.result(timeout=120).prompt.tolist() for f in early] == want[:5]
        pool.started[0].result(timeout=120)
        late = pool.submit(records[5])
        assert late.result(timeout=120).prompt.tolist() == want[5]
        assert pool.prepared_while_starting == 3  # once up, the pool prepares every record
    finally:
        pool.close()


class FailingTokenizer:
    """A working tokenizer that refuses any text holding 'BOOM' (a record that fails to prepare)."""

    def __init__(self, tokenizer) -> None:
        self.tokenizer = tokenizer

    def __getattr__(self, name):
        return getattr(self.__dict__["tokenizer"], name)

    def __call__(self, text, *args, **kwargs):
        if "BOOM" in text:
            raise ValueError("this record cannot be tokenised")
        return self.tokenizer(text, *args, **kwargs)

    def __reduce__(self):
        return FailingTokenizer, (self.tokenizer,)


def _syslog(i: int, text: str = "link down") -> TelemetryRecord:
    return TelemetryRecord(id=f"r{i}", kind="syslog", source="enb-7",
                           body=f"<11>1 2026-11-29T10:00:00Z cell{i} ran - - - {text} on port {i}")


def test_a_burst_goes_to_the_pool_in_batches_each_record_answered_as_alone(tmp_path):
    tokenizer = tiny_tokenizer()
    records = [_syslog(i, "BOOM" if i == 57 else "link down") for i in range(200)]
    pool = Preprocessor(FailingTokenizer(tokenizer), workers=1)
    try:
        pool.started[0].result(timeout=120)
        futures = [pool.submit(r) for r in records]
        for i, (record, future) in enumerate(zip(records, futures)):
            if i == 57:
                with pytest.raises(ValueError, match="cannot be tokenised"):
                    future.result(timeout=120)
            else:
                assert future.result(timeout=120).prompt.tolist() == prepare(record, tokenizer).prompt.tolist()
        # One process: while it works on a batch (and one more waits in the call queue) the rest gather.
        assert pool.batches_sent <= 2 + len(records) // preprocess.MAX_BATCH + 1
        assert pool.batches_sent >= len(records) // preprocess.MAX_BATCH  # no batch beyond MAX_BATCH
    finally:
        pool.close()


def test_a_lone_record_is_sent_at_once(tmp_path):
    pool = Preprocessor(tiny_tokenizer(), workers=1)
    try:
        pool.started[0].result(timeout=120)
        for i in range(3):  # one at a time: each its own task, none waits for company
            assert pool.submit(_syslog(i)).result(timeout=120).prompt.size > 0
        assert pool.batches_sent == 3
    finally:
        pool.close()


def test_records_still_waiting_at_close_are_cancelled(tmp_path):
    gate = tmp_path / "gate"
    pool = Preprocessor(GatedRealTokenizer(tiny_tokenizer(), str(gate)), workers=1)
    pool._answering = True  # as if up: every record goes to the (still gated) process
    try:
        futures = [pool.submit(_syslog(i)) for i in range(10)]
        assert pool.batches_sent == 2  # the process's task and one queued; the other 8 wait
        pool.close()
        assert all(f.cancelled() for f in futures[2:])
    finally:
        gate.touch()
        pool.close()
