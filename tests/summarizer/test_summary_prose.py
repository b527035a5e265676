"""A finished record's summary text and its check against the facts are written off the polling thread
(the preprocessing pool), and its Summary reaches the poller whatever becomes of that work."""

from __future__ import annotations

import concurrent.futures
import queue
import threading
from concurrent.futures.process import BrokenProcessPool

import pytest

from worker.engine.sequence import SamplingParams, Sequence, SequenceStatus
from worker.facts import extract_facts
from worker.messages import Summary, TelemetryRecord
from worker.summarizer.preprocess import Preprocessor
from worker.summarizer.result_collector import ResultCollector
from worker.summarizer.summary_assembly import Generated, RecordRequest, summary_prose

from tests.engine.tiny_tokenizer import tiny_tokenizer

POLL_WAIT_S = 600  # far beyond any test: a poller still waiting this long was never woken


def _record(i: int) -> TelemetryRecord:
    return TelemetryRecord(id=f"r{i}", kind="syslog", source="enb-7",
                           body=f"<11>1 2026-11-29T10:00:00Z cell{i} ran - - - link down on port {i}")


def _decode(ids: list[int]) -> str:
    return tiny_tokenizer().decode(ids, skip_special_tokens=True)


def _finished(seq_id: int, text: str = "cell link lost. Stop here") -> Sequence:
    ids = tiny_tokenizer()(text, add_special_tokens=False)["input_ids"]
    return Sequence(seq_id, [1, 2, 3], SamplingParams(8, stop=("Stop",)), status=SequenceStatus.FINISHED,
                    output=list(ids), finish_reason="length")


class Collecting:
    """A ResultCollector over a queue of our own, each record's sequence owned by its request."""

    def __init__(self, prose) -> None:
        self.finished: queue.SimpleQueue = queue.SimpleQueue()
        self.collector = ResultCollector(self.finished, model="m", decode=_decode, level_done=lambda req: None,
                                         prose=prose)
        self.records: dict[str, TelemetryRecord] = {}

    def finish(self, i: int) -> Sequence:
        record = _record(i)
        self.records[record.id] = record
        req = RecordRequest(record.id, record, extract_facts(record), 0.0)
        seq = _finished(i)
        self.collector.track(req, -1, lambda: seq)
        self.finished.put(seq)
        return seq


def _expected(record: TelemetryRecord, seq: Sequence) -> tuple[str, object]:
    return summary_prose(record, extract_facts(record), Generated.of(seq), _decode)


def test_prose_cuts_the_stop_string_and_checks_the_opening_with_the_models_words():
    record, seq = _record(1), _finished(1)
    text, narrative = summary_prose(record, extract_facts(record), Generated.of(seq), _decode)
    assert "Stop" not in text and "link lost" in text
    assert text.startswith("cell1")  # the grounded opening the prompt ended with
    assert narrative.names_element
    already_cut = Generated("words of a stop check", seq.output, ("Stop",))
    assert summary_prose(record, extract_facts(record), already_cut, _decode)[0].endswith("words of a stop check")


def test_a_summary_written_elsewhere_wakes_the_poller_waiting_on_the_engine():
    pending: list[concurrent.futures.Future] = []

    def prose(record, facts, generated):
        pending.append(concurrent.futures.Future())
        return pending[-1]

    c = Collecting(prose)
    seq = c.finish(1)
    assert c.collector.poll(0.0) == []  # sent to be written: nothing to hand out yet
    assert len(pending) == 1
    got: list = []
    poller = threading.Thread(target=lambda: got.extend(c.collector.poll(POLL_WAIT_S)), daemon=True)
    poller.start()
    pending[0].set_result(_expected(c.records["r1"], seq))  # from this thread, as the pool's thread does
    poller.join(60)
    assert not poller.is_alive(), "the poller was not woken by the summary written elsewhere"
    [(rid, summary)] = got
    assert rid == "r1" and isinstance(summary, Summary)
    assert (summary.summary, summary.narrative) == _expected(c.records["r1"], seq)
    assert c.collector.wait_written(0.0)


@pytest.mark.parametrize("fate", ["broken", "cancelled", "refused"])
def test_a_summary_the_pool_cannot_write_is_written_here(fate):
    def prose(record, facts, generated):
        if fate == "refused":
            raise RuntimeError("the preprocessor is closed")
        future: concurrent.futures.Future = concurrent.futures.Future()
        if fate == "broken":
            future.set_exception(BrokenProcessPool("a process of the pool died"))
        else:
            future.cancel()
        return future

    c = Collecting(prose)
    seq = c.finish(2)
    [(rid, summary)] = c.collector.poll(5.0)
    assert rid == "r2" and isinstance(summary, Summary)
    assert (summary.summary, summary.narrative) == _expected(c.records["r2"], seq)


def test_a_summary_whose_text_fails_comes_back_as_its_error():
    def failing_decode(ids):
        raise ValueError("undecodable output")

    future: concurrent.futures.Future = concurrent.futures.Future()
    future.set_exception(ValueError("undecodable output"))
    c = Collecting(lambda record, facts, generated: future)
    c.collector._decode = failing_decode  # written here again, it fails the same way
    c.finish(3)
    [(rid, result)] = c.collector.poll(5.0)
    assert rid == "r3" and isinstance(result, ValueError)


def test_wait_written_holds_until_the_last_summary_is_pushed():
    pending: list[concurrent.futures.Future] = []
    c = Collecting(lambda record, facts, generated: pending.append(concurrent.futures.Future()) or pending[-1])
    seqs = [c.finish(i) for i in range(3)]
    c.collector.pump(0.0)
    assert not c.collector.wait_written(0.05)
    for i, (future, seq) in enumerate(zip(pending, seqs)):
        future.set_result(_expected(c.records[f"r{i}"], seq))
    assert c.collector.wait_written(5.0)
    assert sorted(rid for rid, _ in c.collector.poll(0.0)) == ["r0", "r1", "r2"]


def test_the_pool_writes_the_same_prose_as_this_thread():
    tokenizer = tiny_tokenizer()
    records = [_record(i) for i in range(40)]
    gens = [Generated.of(_finished(i, f"cell{i} alarm raised, port {i} down. Stop")) for i in range(40)]
    pool = Preprocessor(tokenizer, workers=1)
    here = Preprocessor(tokenizer, workers=0)
    try:
        pool.started[0].result(timeout=120)
        pool.submit(records[0]).result(timeout=120)  # the first submit after start-up sees the pool up
        sent = pool.batches_sent
        futures = [pool.summary_prose(r, extract_facts(r), g) for r, g in zip(records, gens)]
        got = [f.result(timeout=120) for f in futures]
        assert pool.batches_sent > sent  # written in the pool's process
        assert got == [here.summary_prose(r, extract_facts(r), g).result() for r, g in zip(records, gens)]
    finally:
        pool.close()
        here.close()
