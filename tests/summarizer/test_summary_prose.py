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
from worker.summarizer import preprocess
from worker.summarizer.preprocess import Preprocessor
from worker.summarizer.result_collector import POOL_PROSE_MIN, ResultCollector
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
        self.seqs: dict[str, Sequence] = {}

    def finish(self, ids: range) -> None:
        """Records `ids` finish together (one pump moves them all)."""
        for i in ids:
            record = _record(i)
            self.records[record.id], self.seqs[record.id] = record, _finished(i)
            req = RecordRequest(record.id, record, extract_facts(record), 0.0)
            self.collector.track(req, -1, lambda seq=self.seqs[record.id]: seq)
        for i in ids:
            self.finished.put(self.seqs[f"r{i}"])

    def expected(self, rid: str) -> tuple[str, object]:
        record = self.records[rid]
        return summary_prose(record, extract_facts(record), Generated.of(self.seqs[rid]), _decode)

    def check(self, results: list) -> None:
        """Each result is its record's Summary, with the text and check written here."""
        for rid, summary in results:
            assert isinstance(summary, Summary), summary
            assert (summary.summary, summary.narrative) == self.expected(rid)


class PendingProse:
    """A pool stand-in: every call's futures wait until the test completes them."""

    def __init__(self) -> None:
        self.calls: list[list[tuple]] = []
        self.futures: list[concurrent.futures.Future] = []

    def __call__(self, finished):
        self.calls.append(list(finished))
        futures = [concurrent.futures.Future() for _ in finished]
        self.futures += futures
        return futures

    def complete(self) -> None:
        for (record, facts, generated), future in zip([i for c in self.calls for i in c], self.futures):
            if not future.done():
                future.set_result(summary_prose(record, facts, generated, _decode))


def test_prose_cuts_the_stop_string_and_checks_the_opening_with_the_models_words():
    record, seq = _record(1), _finished(1)
    text, narrative = summary_prose(record, extract_facts(record), Generated.of(seq), _decode)
    assert "Stop" not in text and "link lost" in text
    assert text.startswith("cell1")  # the grounded opening the prompt ended with
    assert narrative.names_element
    already_cut = Generated("words of a stop check", seq.output, ("Stop",))
    assert summary_prose(record, extract_facts(record), already_cut, _decode)[0].endswith("words of a stop check")


def test_summaries_finished_together_go_to_the_pool_and_wake_the_poller_when_written():
    prose = PendingProse()
    c = Collecting(prose)
    c.finish(range(POOL_PROSE_MIN))
    assert c.collector.poll(0.0) == []  # sent to be written: nothing to hand out yet
    assert [[r.id for r, _, _ in call] for call in prose.calls] == [[f"r{i}" for i in range(POOL_PROSE_MIN)]]
    got: list = []
    poller = threading.Thread(target=lambda: got.extend(c.collector.poll(POLL_WAIT_S)), daemon=True)
    poller.start()
    prose.complete()  # from this thread, as the pool's thread does
    poller.join(60)
    assert not poller.is_alive(), "the poller was not woken by the summaries written elsewhere"
    got += c.collector.poll(0.0)
    assert sorted(rid for rid, _ in got) == [f"r{i}" for i in range(POOL_PROSE_MIN)]
    c.check(got)
    assert c.collector.wait_written(0.0)


def test_fewer_summaries_than_a_pool_task_is_worth_are_written_here():
    prose = PendingProse()
    c = Collecting(prose)
    c.finish(range(POOL_PROSE_MIN - 1))
    got = c.collector.poll(5.0)
    assert prose.calls == []
    assert sorted(rid for rid, _ in got) == [f"r{i}" for i in range(POOL_PROSE_MIN - 1)]
    c.check(got)


@pytest.mark.parametrize("fate", ["broken", "cancelled", "refused"])
def test_a_summary_the_pool_cannot_write_is_written_here(fate):
    def prose(finished):
        if fate == "refused":
            raise RuntimeError("the preprocessor is closed")
        futures = [concurrent.futures.Future() for _ in finished]
        for future in futures:
            if fate == "broken":
                future.set_exception(BrokenProcessPool("a process of the pool died"))
            else:
                future.cancel()
        return futures

    c = Collecting(prose)
    c.finish(range(POOL_PROSE_MIN))
    got = c.collector.poll(5.0)
    assert sorted(rid for rid, _ in got) == [f"r{i}" for i in range(POOL_PROSE_MIN)]
    c.check(got)


def test_a_summary_whose_text_fails_comes_back_as_its_error():
    def failing_decode(ids):
        raise ValueError("undecodable output")

    def prose(finished):
        futures = [concurrent.futures.Future() for _ in finished]
        for future in futures:
            future.set_exception(ValueError("undecodable output"))
        return futures

    c = Collecting(prose)
    c.collector._decode = failing_decode  # written here again, it fails the same way
    c.finish(range(POOL_PROSE_MIN))
    got = c.collector.poll(5.0)
    assert len(got) == POOL_PROSE_MIN and all(isinstance(result, ValueError) for _, result in got)


def test_wait_written_holds_until_the_last_summary_is_pushed():
    prose = PendingProse()
    c = Collecting(prose)
    c.finish(range(POOL_PROSE_MIN))
    c.collector.pump(0.0)
    assert not c.collector.wait_written(0.05)
    prose.complete()
    assert c.collector.wait_written(5.0)
    assert sorted(rid for rid, _ in c.collector.poll(0.0)) == [f"r{i}" for i in range(POOL_PROSE_MIN)]


def test_the_pool_writes_the_same_prose_as_this_thread_in_batches_over_its_processes():
    tokenizer = tiny_tokenizer()
    finished = [(r, extract_facts(r), Generated.of(_finished(i, f"cell{i} alarm raised, port {i} down. Stop")))
                for i, r in enumerate(_record(i) for i in range(100))]
    pool = Preprocessor(tokenizer, workers=2)
    here = Preprocessor(tokenizer, workers=0)
    try:
        for started in pool.started:
            started.result(timeout=120)
        pool.submit(_record(0)).result(timeout=120)  # the first submit after start-up sees the pool up
        sent = pool.batches_sent
        got = [f.result(timeout=120) for f in pool.summary_prose(finished)]
        # both processes and the call queue got a batch at once; the rest went as batches answered
        assert 4 <= pool.batches_sent - sent <= 4 + (len(finished) - 3 * preprocess.MAX_BATCH)
        assert got == [f.result() for f in here.summary_prose(finished)]
    finally:
        pool.close()
        here.close()
