"""Summarizer on a tiny random model: order, token counts, long-input lane, hierarchical path, errors."""

import random
import threading
import time
from types import SimpleNamespace

import pytest
import torch

from worker.engine.errors import ArenaTooSmall, ContextTooLong, EngineClosed
from worker.engine.plans import PrefillBin, PrefillChunk
from worker.summarizer.pieces import RecordTooLong, merge_prompt, plan_chunk_prompts, plan_merge
from worker.facts import extract_facts
from worker.messages import Summary, TelemetryRecord
from worker.model.attention import SdpaBackend
from worker.model.config import ModelConfig
from worker.model.llama import LlamaModel
from worker.summarizer.long_records import MAX_PIECES_IN_FLIGHT
from worker.summarizer.preprocess import Preprocessor
from worker.prompts import answer_opening, build_messages, with_opening
from worker.settings.budgets import GPU_WORK_CAP_TOKENS, MIN_WORK_CAP_TOKENS, Budgets
from worker.settings.sections import EngineSettings
from worker.summarizer.summarizer import Summarizer

from tests.engine.conftest import FakeDispatcher
from tests.engine.helpers import generate
from tests.engine.tiny_tokenizer import tiny_tokenizer

MAX_NEW = 6


@pytest.fixture(scope="module")
def loaded():
    cfg = ModelConfig.tiny(vocab_size=259, max_position_embeddings=4096, eos_token_ids=(2,))
    torch.manual_seed(1)
    model = LlamaModel(cfg, SdpaBackend()).eval()
    with torch.no_grad():
        model.lm_head.weight.mul_(4.0)
    return SimpleNamespace(model=model, config=cfg, tokenizer=tiny_tokenizer(), name="tiny-random")


def _record(i: int, body: str | None = None) -> TelemetryRecord:
    return TelemetryRecord(id=f"r{i}", kind="syslog", source="enb-7",
                           body=body or f"<11>1 2026-11-29T10:0{i % 10}:00Z cell{i} ran - - - link down on port {i}")


def _built(loaded, token_budget=1024, *, kv_rows=None, preprocess_workers=None, **engine) -> Summarizer:
    """A Summarizer of MAX_NEW tokens, 64 sequences per bin and no work cap unless `engine` says otherwise."""
    settings = EngineSettings(**{"max_new_tokens": MAX_NEW, "max_record_tokens": 0, **engine})
    preprocessor = None if preprocess_workers is None else Preprocessor(loaded.tokenizer, preprocess_workers)
    return Summarizer(loaded, settings, Budgets(token_budget, 64, kv_rows, {}),
                      dispatcher=FakeDispatcher(token_budget, 16), preprocessor=preprocessor)


def _summarizer(loaded, token_budget=1024, **kw) -> Summarizer:
    s = _built(loaded, token_budget, **kw)
    s.start()
    return s


def _expected_text(loaded, prompts: list[list[int]], strip: bool = True) -> list[str]:
    outs = generate(loaded.model, prompts, max_new=MAX_NEW, token_budget=4096, capacity=8192, eos_ids=(2,))
    texts = [loaded.tokenizer.decode(o, skip_special_tokens=True) for o in outs]
    return [t.strip() for t in texts] if strip else texts


def _expected_summaries(loaded, prompts: list[list[int]], records: list[TelemetryRecord]) -> list[str]:
    """What the Summary says: the answer's opening (the prompt's end) and the greedy continuation."""
    return [with_opening(answer_opening(r, extract_facts(r)), t)
            for r, t in zip(records, _expected_text(loaded, prompts, strip=False))]


def test_summarizer_summarize_all_keeps_order_and_matches_greedy(loaded):
    records = [_record(i) for i in range(5)]
    s = _summarizer(loaded)
    try:
        summaries = list(s.summarize_all(records))
    finally:
        s.close()
    prompts = [s.tokenize(build_messages(r, extract_facts(r))) for r in records]
    assert [x.id for x in summaries] == [r.id for r in records]
    assert [x.summary for x in summaries] == _expected_summaries(loaded, prompts, records)
    for x, p, r in zip(summaries, prompts, records):
        assert isinstance(x, Summary) and x.model == "tiny-random" and not x.hierarchical
        assert x.prompt_tokens == len(p) and 0 < x.output_tokens <= MAX_NEW
        assert x.facts == extract_facts(r)
        assert x.timings.total_s >= x.timings.decode_s >= 0


def test_summarizer_long_input_uses_chunked_prefill_and_matches_one_shot(loaded):
    record = _record(1, body="\n".join(f"line {i}: ERROR link down on cell {i % 7}" for i in range(40)))
    s = _summarizer(loaded, token_budget=256)
    try:
        (summary,) = list(s.summarize_all([record]))
        prompt = s.tokenize(build_messages(record, extract_facts(record)))
    finally:
        s.close()
    assert 256 < len(prompt) < 4096 - MAX_NEW  # longer than a bin, inside the context
    assert not summary.hierarchical and summary.prompt_tokens == len(prompt)
    assert summary.summary == _expected_summaries(loaded, [prompt], [record])[0]


def test_summarizer_beyond_context_summarises_hierarchically(loaded):
    words = ["link", "down", "fan", "power", "sync", "lost", "radio", "fault", "cleared", "major", "minor"]
    rng = random.Random(0)  # distinct lines: repeats would be collapsed before splitting
    body = "\n".join(" ".join(rng.choice(words) for _ in range(8)) for _ in range(60))
    record = _record(2, body=body)
    s = _summarizer(loaded, token_budget=512, max_context=1024)
    try:
        (summary,) = list(s.summarize_all([record]))
        limit = 1024 - MAX_NEW
        chunk_prompts = plan_chunk_prompts(record, tokenize=s.tokenize, count_tokens=s._count_tokens,
                                           max_prompt_tokens=limit)
        pieces = _expected_text(loaded, chunk_prompts)
        merge = merge_prompt(record, extract_facts(record), pieces, tokenize=s.tokenize, max_prompt_tokens=limit)
    finally:
        s.close()
    assert len(chunk_prompts) >= 3 and all(len(p) <= limit for p in chunk_prompts)
    assert summary.hierarchical and summary.chunks == len(chunk_prompts)
    assert summary.summary == _expected_summaries(loaded, [merge], [record])[0]
    assert summary.prompt_tokens == sum(map(len, chunk_prompts)) + len(merge)


def test_summarizer_failed_request_comes_back_as_exception_and_loop_survives(loaded):
    ok, big = _record(4), _record(3, body="x " * 400)
    s = _summarizer(loaded, kv_rows=1)  # only to measure prompts with the real template
    prompt_len = {r.id: len(s.tokenize(build_messages(r, extract_facts(r)))) for r in (ok, big)}
    s.close()
    capacity = prompt_len["r4"] + MAX_NEW  # exactly what "ok" needs
    assert prompt_len["r3"] + MAX_NEW > capacity and prompt_len["r3"] + MAX_NEW <= s.max_context
    s = _summarizer(loaded, kv_rows=capacity)
    try:
        s.submit("big", big)
        s.submit("ok", ok)
        results = {}
        while len(results) < 2:
            results.update(s.poll(1.0))
    finally:
        s.close()
    assert isinstance(results["big"], ArenaTooSmall), results
    assert isinstance(results["ok"], Summary)


def test_summarizer_close_drain_finishes_everything_submitted(loaded):
    s = _summarizer(loaded)
    for i in range(4):
        s.submit(i, _record(i))
    s.close(drain=True)
    results = dict(s.poll(0.0))
    assert sorted(results) == [0, 1, 2, 3] and all(isinstance(r, Summary) for r in results.values())
    with pytest.raises(RuntimeError, match="closed"):
        s.submit(9, _record(9))


def test_summarizer_close_without_drain_fails_unfinished(loaded):
    s = _summarizer(loaded)
    for i in range(6):
        s.submit(i, _record(i))
    s.close(drain=False)
    results = dict(s.poll(0.0))
    assert sorted(results) == list(range(6))  # every request answered
    assert all(isinstance(r, (Summary, EngineClosed)) for r in results.values())


def test_summarizer_preprocessing_pool_gives_the_same_summaries(loaded, monkeypatch):
    import worker.summarizer.result_collector

    monkeypatch.setattr(worker.summarizer.result_collector, "POOL_PROSE_MIN", 1)  # even a lone summary
    records = [_record(i) for i in range(12)]
    in_thread = _summarizer(loaded)
    pooled = _summarizer(loaded, preprocess_workers=2)
    try:
        assert pooled.preprocessor.workers == 2
        for started in pooled.preprocessor.started:  # up: records are prepared and written in the pool
            started.result(timeout=120)
        written = []
        pool_prose = pooled.results._prose
        pooled.results._prose = lambda finished: written.extend(r.id for r, _, _ in finished) or pool_prose(finished)
        expected = list(in_thread.results_in_order(records))
        got = list(pooled.results_in_order(records))
        assert pooled.preprocessor.prepared_while_starting == 0 and pooled.preprocessor._answering
        assert sorted(written) == sorted(r.id for r in records)  # every summary's prose by the pool
    finally:
        in_thread.close()
        pooled.close()
    assert [r.id for r, _ in got] == [r.id for r in records]
    assert [x.summary for _, x in got] == [x.summary for _, x in expected]
    assert [x.facts for _, x in got] == [x.facts for _, x in expected]
    assert [x.narrative for _, x in got] == [x.narrative for _, x in expected]


def test_summarizer_record_failing_preparation_comes_back_as_its_error(loaded, monkeypatch):
    import worker.summarizer.preprocess

    real = worker.summarizer.preprocess.prepare

    def prepare(record, *args):
        if record.id == "r1":
            raise ValueError("cannot render r1")
        return real(record, *args)

    monkeypatch.setattr(worker.summarizer.preprocess, "prepare", prepare)
    s = _summarizer(loaded)
    try:
        results = dict((r.id, x) for r, x in s.results_in_order([_record(i) for i in range(3)]))
    finally:
        s.close()
    assert isinstance(results["r1"], ValueError) and "r1" in str(results["r1"])
    assert isinstance(results["r0"], Summary) and isinstance(results["r2"], Summary)


def test_summarizer_submit_raises_backpressure_past_max_pending(loaded):
    from worker.dispatch import Backpressure

    s = _built(loaded)
    s.max_pending_records = 0
    with pytest.raises(Backpressure, match="waiting"):
        s.submit("r0", _record(0))


def test_summarizer_prefix_cache_same_summaries_and_serves_shared_heads(loaded):
    records = [_record(i) for i in range(8)]
    plain = _summarizer(loaded, prefix_cache=False)
    cached = _summarizer(loaded, kv_rows=32768)
    try:
        assert plain.prefix is None and cached.prefix is not None
        expected = [x.summary for x in plain.summarize_all(records[:1])]
        expected += [x.summary for x in plain.summarize_all(records[1:])]
        got = [x.summary for x in cached.summarize_all(records[:1])]  # the first record fills the cache
        got += [x.summary for x in cached.summarize_all(records[1:])]
        stats = cached.prefix.stats()
    finally:
        plain.close()
        cached.close()
    assert got == expected
    assert stats["hits"] >= 7 and stats["hit_token_share"] > 0.3  # the system prompt and example are shared


def test_head_tokenizer_concatenation_equals_tokenising_the_whole_prompt(loaded):
    from worker.summarizer.preprocess import HeadTokenizer, tokenize_messages
    from worker.samples import generate

    heads = HeadTokenizer(loaded.tokenizer)
    records = [r for r, _ in generate(24, "short", seed=3)] + [_record(i) for i in range(3)]
    kinds = {r.kind for r in records}
    for record in records:
        messages = build_messages(record, extract_facts(record))
        assert heads(messages) == tokenize_messages(loaded.tokenizer, messages), record.id
    assert len(kinds) >= 4 and all(v is not None for v in heads._heads.values())  # every kind split, none fell back


def _long_body(lines: int, seed: int = 0) -> str:
    words = ["link", "down", "fan", "power", "sync", "lost", "radio", "fault", "cleared", "major", "minor"]
    rng = random.Random(seed)  # distinct lines: repeats would be collapsed before splitting
    return "\n".join(" ".join(rng.choice(words) for _ in range(8)) for _ in range(lines))


def test_plan_merge_groups_fit_and_shrink_the_level(loaded):
    s = _summarizer(loaded, kv_rows=1, max_context=1024)  # only its tokenizer
    s.close()
    record, limit = _record(5, body="x"), 1024 - MAX_NEW
    summaries = [f"cell{i} reported link down and recovered at 10:{i % 60:02d}" for i in range(60)]
    facts = extract_facts(record)
    with pytest.raises(ContextTooLong):
        merge_prompt(record, facts, summaries, tokenize=s.tokenize, max_prompt_tokens=limit)
    level = plan_merge(record, facts, summaries, tokenize=s.tokenize, max_prompt_tokens=limit)
    assert 1 < len(level) < len(summaries) and all(len(p) <= limit for p in level)
    # Every summary is in exactly one group, in order.
    text = "".join(loaded.tokenizer.decode(p) for p in level)
    assert [text.find(x) for x in summaries] == sorted(text.find(x) for x in summaries)
    assert all(text.count(x + "\n") + text.count(x + "<") == 1 for x in summaries)
    # a group's merge is read by the next level: it ends at the generation prompt, not with the opening
    assert all(answer_opening(record, facts) not in loaded.tokenizer.decode(p) for p in level)


def test_summarizer_piece_summaries_over_one_context_merge_in_a_tree(loaded):
    # So many pieces that their summaries do not fit one merge prompt: a tree of merges still ends
    # in one summary (one merge over all of them raised ContextTooLong before).
    record = _record(6, body=_long_body(700))
    s = _summarizer(loaded, token_budget=512, max_context=1024)
    try:
        limit = 1024 - MAX_NEW
        chunk_prompts = plan_chunk_prompts(record, tokenize=s.tokenize, count_tokens=s._count_tokens,
                                           max_prompt_tokens=limit)
        placeholder = ["x" * MAX_NEW] * len(chunk_prompts)
        with pytest.raises(ContextTooLong):
            merge_prompt(record, extract_facts(record), placeholder, tokenize=s.tokenize, max_prompt_tokens=limit)
        (summary,) = list(s.summarize_all([record]))
    finally:
        s.close()
    assert summary.hierarchical and summary.chunks == len(chunk_prompts)
    assert summary.prompt_tokens > sum(map(len, chunk_prompts)) + limit  # more than one merge ran


def test_summarizer_long_record_pieces_interleave_with_later_records(loaded):
    # A long record submitted first keeps only a few pieces in the engine at a time, so a short
    # record submitted after it is answered while most of the long one's pieces still wait.
    long_record, short = _record(7, body=_long_body(300)), _record(8)
    s = _summarizer(loaded, token_budget=512, max_context=1024)
    try:
        s.submit("long", long_record)
        s.submit("short", short)
        order: list = []
        while "short" not in order:
            order += [rid for rid, _ in s.poll(1.0)]
        (long_req,) = s.long_records._deferred
        waiting = len(long_req.todo)
        while len(order) < 2:
            order += [rid for rid, _ in s.poll(1.0)]
    finally:
        s.close()
    assert order == ["short", "long"]
    assert waiting >= long_req.num_chunks - 2 * MAX_PIECES_IN_FLIGHT


def test_summarizer_short_record_behind_a_long_one_is_not_held_by_its_chunks(loaded):
    # A slow CPU (each long-lane chunk made to take 0.3 s, decode steps take milliseconds): a short
    # record submitted while a long record's pieces are being prefilled gets decode steps for as
    # long as each chunk ran, so it is answered after a chunk or two, not one chunk per token.
    longs, short = [_record(14 + i, body=_long_body(300, seed=i)) for i in range(3)], _record(17)
    s = _summarizer(loaded, token_budget=2048, max_context=4096, max_new_tokens=24, kv_rows=32768)
    short_len = len(s.tokenize(build_messages(short, extract_facts(short))))
    assert short_len <= 2048  # a bin; the long records' pieces go by chunks
    chunk = s.runner.prefill_chunk

    def slow_chunk(*args, **kwargs):
        time.sleep(0.3)
        return chunk(*args, **kwargs)

    s.runner.prefill_chunk = slow_chunk
    chunks: list[float] = []
    admitted: list[float] = []  # when the short record's prefill ran

    def observe(plan, started, taken, ended):
        if isinstance(plan, PrefillChunk):
            chunks.append(ended)
        elif isinstance(plan, PrefillBin) and any(seq.prompt_len == short_len for seq in plan.seqs):
            admitted.append(ended)

    s.engine.step_observers.append(observe)
    try:
        for i, record in enumerate(longs):  # pieces of three: the long lane always has one waiting
            s.submit(f"long-{i}", record)
        deadline = time.monotonic() + 120
        while len(s.engine.scheduler.waiting_long) < 3:  # pieces queue for the long lane
            assert time.monotonic() < deadline, "the long records' pieces never queued"
            time.sleep(0.01)
        s.submit("short", short)
        order, answered = [], None
        while len(order) < 4:
            for rid, result in s.poll(1.0):
                assert isinstance(result, Summary), result
                order.append(rid)
                answered = answered or time.perf_counter()
    finally:
        s.close()
    assert order[0] == "short"
    assert len([t for t in chunks if admitted[0] < t < answered]) <= 2
    assert len(chunks) > 6  # the long record's pieces went through the long lane


def test_summarizer_over_work_cap_summarises_stated_selection(loaded):
    record = _record(9, body=_long_body(2000))
    s = _summarizer(loaded, token_budget=512, max_context=1024, max_record_tokens=3000)
    try:
        (summary,) = list(s.summarize_all([record]))
    finally:
        s.close()
    assert summary.hierarchical and summary.selection is not None
    assert "work cap of 3000 tokens" in summary.selection and "of 2000 lines" in summary.selection
    uncapped = plan_chunk_prompts(record, tokenize=s.tokenize, count_tokens=s._count_tokens,
                                  max_prompt_tokens=1024 - MAX_NEW)
    assert summary.chunks < len(uncapped) / 5


def test_summarizer_unset_work_cap_on_cpu_is_measured_at_start_and_stated(loaded, caplog):
    caplog.set_level("INFO", logger="worker.summarizer.summarizer")
    s = _summarizer(loaded, max_record_tokens=None)
    s.close()
    assert s.work_cap.source.startswith("measured on cpu: ") and "tokens/s x 10 s" in s.work_cap.source
    assert MIN_WORK_CAP_TOKENS <= s.work_cap.tokens <= GPU_WORK_CAP_TOKENS
    assert s.long_records.max_record_tokens == s.work_cap.tokens
    assert f"per-record work cap {s.work_cap.tokens} body tokens (measured on cpu" in caplog.text
    explicit = _summarizer(loaded, max_record_tokens=3000)
    explicit.close()
    assert (explicit.work_cap.tokens, explicit.work_cap.source) == (3000, "engine.max_record_tokens")


def test_summarizer_work_cap_below_the_context_applies_to_records_within_it(loaded):
    # A slow CPU's cap may be below the context: a record that fits one prompt but whose body is
    # over the cap is summarised from its stated selection too; one under it, whole.
    over, under = _record(12, body=_long_body(40)), _record(13, body=_long_body(10, seed=1))
    s = _summarizer(loaded, token_budget=1024, max_context=4096, max_record_tokens=1024)
    try:
        assert len(s.tokenize(build_messages(over, extract_facts(over)))) < 4096 - MAX_NEW
        assert s.long_records.is_over_cap(over) and not s.long_records.is_over_cap(under)
        capped, whole = list(s.summarize_all([over, under]))
    finally:
        s.close()
    assert capped.selection is not None and "work cap of 1024 tokens" in capped.selection
    assert whole.selection is None and not whole.hierarchical


def test_summarizer_over_work_cap_dead_letter_policy_refuses(loaded):
    s = _summarizer(loaded, token_budget=512, max_context=1024, max_record_tokens=3000, over_cap="dead_letter")
    try:
        s.submit("big", _record(10, body=_long_body(2000)))  # planned apart: refused as its result
        s.submit("small", _record(11))
        results: dict = {}
        while len(results) < 2:
            results.update(s.poll(1.0))
    finally:
        s.close()
    assert isinstance(results["big"], RecordTooLong) and "work cap of 3000" in str(results["big"])
    assert isinstance(results["small"], Summary) and results["small"].selection is None
    with pytest.raises(ValueError, match="over_cap"):
        _built(loaded, token_budget=512, over_cap="drop")


def test_summarizer_far_beyond_context_plans_off_the_callers_thread(loaded):
    # The Kafka poll loop calls submit: a multi-context record must not be tokenised on its thread.
    s = _summarizer(loaded, token_budget=1024)  # the model's 4,096-token context: "fits" fits
    planned_on: list[str] = []
    plan = s.long_records.plan_pieces
    s.long_records.plan_pieces = lambda req: (planned_on.append(threading.current_thread().name), plan(req))[1]
    try:
        s.submit("long", _record(12, body=_long_body(1000)))
        s.submit("fits", _record(13))
        results: dict = {}
        while len(results) < 2:
            results.update(s.poll(1.0))
    finally:
        s.close()
    assert planned_on == ["telesum-long-plan"]
    assert results["long"].hierarchical and isinstance(results["fits"], Summary)


def test_summarizer_prefix_cache_region_follows_the_setting_and_never_takes_slab_rows(loaded):
    from worker.commands.runtime import build_summarizer
    from worker.settings.load import load_settings

    engine = load_settings(env={"TELESUM_PREFIX_CACHE_TOKENS": "1000"}).settings.engine
    assert engine.prefix_cache_tokens == 1000
    budgets = Budgets(token_budget=1024, max_seqs_per_bin=16, kv_rows=None, sources={})
    sized = build_summarizer(engine, budgets, loaded, dispatcher=FakeDispatcher(1024, 16))
    given = _built(loaded, kv_rows=loaded.config.max_position_embeddings + 256, prefix_cache_tokens=1000)
    off = build_summarizer(load_settings(env={"TELESUM_PREFIX_CACHE": "false"}).settings.engine, budgets, loaded,
                           dispatcher=FakeDispatcher(1024, 16))
    try:
        cache = sized.prefix.cache
        assert cache.num_blocks * cache.block_size == 992  # whole 32-token blocks
        assert sized.arena.cache.capacity_rows == sized.arena.capacity_rows + 992  # beside the slabs' rows
        assert sized.arena.capacity_rows == off.arena.capacity_rows  # the slabs keep every row they had
        assert given.prefix.cache.num_blocks * given.prefix.cache.block_size == 256  # a context stays for slabs
        assert off.prefix is None
    finally:
        for s in (sized, given, off):
            s.close()


def test_summarizer_work_enters_the_engine_only_from_the_feeder_thread(loaded):
    import threading

    words = ["link", "down", "fan", "power", "sync", "lost", "radio", "fault", "cleared", "major", "minor"]
    rng = random.Random(1)
    body = "\n".join(" ".join(rng.choice(words) for _ in range(8)) for _ in range(60))
    records = [_record(1), _record(2, body=body), _record(3)]
    s = _summarizer(loaded, token_budget=512, max_context=1024)
    adders: list[str] = []
    original = s.engine.add

    def add(prompt, params):
        adders.append(threading.current_thread().name)
        return original(prompt, params)

    s.engine.add = add
    try:
        summaries = list(s.summarize_all(records))  # this thread submits and polls
    finally:
        s.close()
    assert [x.id for x in summaries] == ["r1", "r2", "r3"] and summaries[1].hierarchical
    assert len(adders) > len(records)  # pieces and the merge came in too
    assert set(adders) == {"telesum-feeder"}


def test_summarizer_stats_count_bins_tokens_and_prefix_hits_and_feed_every_metric(loaded):
    """Through the native dispatcher the worker uses: a field the metrics read and stats() lacks fails here."""
    from worker.metrics import WorkerMetrics

    s = Summarizer(loaded, EngineSettings(max_new_tokens=MAX_NEW, max_record_tokens=0), Budgets(4096, 64, 32768, {}))
    s.start()
    try:
        list(s.summarize_all([_record(0)]))  # fills the prefix cache
        list(s.summarize_all([_record(i) for i in range(1, 4)]))
        stats = s.stats()
    finally:
        s.close()
    assert stats.bins >= 2 and stats.bin_real_tokens > 0 and 0 < stats.bin_fill_ratio <= 1  # warm-up bin + records
    assert (stats.queue_seqs, stats.queue_tokens, stats.engine_sequences, stats.pending_records) == (0, 0, 0, 0)
    assert stats.prefix_lookup_tokens > stats.prefix_hit_tokens > 0 and stats.prefix_occupancy > 0
    metrics = WorkerMetrics("cpu", "w-1")
    metrics.observe_summarizer(stats, elapsed_s=float("inf"))
    value = lambda name: metrics.registry.get_sample_value(name, metrics.labels)  # noqa: E731
    assert value("telesum_bins_total") == stats.bins
    assert value("telesum_bin_real_tokens_total") == stats.bin_real_tokens
    assert value("telesum_prefix_hit_tokens_total") == stats.prefix_hit_tokens
    assert value("telesum_prefix_cache_occupancy") == stats.prefix_occupancy


def test_what_start_up_built_is_out_of_the_collectors_sight_while_serving(loaded):
    import gc

    s = _summarizer(loaded)
    try:
        assert gc.get_freeze_count() > 1000  # the model's modules, the tokenizer, torch: not walked again
        built_before = gc.get_freeze_count()
        results = list(s.results_in_order([_record(i) for i in range(4)]))
        assert all(isinstance(r, Summary) for _, r in results)
        assert gc.get_freeze_count() <= built_before  # what serving allocates stays collectable (not frozen)
    finally:
        s.close(drain=False)
    assert gc.get_freeze_count() == 0  # all of it collectable again once closed


def test_the_gil_switch_interval_is_the_configured_one_while_serving_and_restored_at_close(loaded):
    import sys

    before = sys.getswitchinterval()
    s = _summarizer(loaded, gil_switch_ms=0.25)
    try:
        assert sys.getswitchinterval() == pytest.approx(0.00025)
        results = list(s.results_in_order([_record(i) for i in range(3)]))
        assert all(isinstance(r, Summary) for _, r in results)
    finally:
        s.close(drain=False)
    assert sys.getswitchinterval() == pytest.approx(before)


def test_on_cpu_the_interpreters_own_gil_switch_interval_stays_unless_configured(loaded):
    import sys

    before = sys.getswitchinterval()
    s = _summarizer(loaded)
    try:
        assert s.gil_switch_s is None and sys.getswitchinterval() == before
    finally:
        s.close(drain=False)


def test_an_fp8_kv_cache_serves_the_same_records_with_prefix_reuse(loaded):
    """engine.kv_cache fp8 (marked on the model at load): the arena holds FP8 rows, prompts after a
    cached head and every decode step read them, and the summaries stay the exact tape's."""
    fp8_loaded = SimpleNamespace(**vars(loaded), fp8_kv=True)
    records = [_record(i) for i in range(8)]
    plain, fp8 = _summarizer(loaded, kv_rows=32768), _summarizer(fp8_loaded, kv_rows=32768)
    try:
        assert plain.arena.cache.fp8 is None and fp8.arena.cache.fp8 is not None
        expected = [x.summary for x in plain.summarize_all(records[:1])]
        expected += [x.summary for x in plain.summarize_all(records[1:])]
        got = [x.summary for x in fp8.summarize_all(records[:1])]
        got += [x.summary for x in fp8.summarize_all(records[1:])]
        stats = fp8.prefix.stats()
    finally:
        plain.close()
        fp8.close()
    assert stats["hits"] >= 7
    assert got == expected
