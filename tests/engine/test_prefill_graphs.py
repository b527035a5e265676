"""PrefillGraphs: a bin padded up to its bucket gives the unpadded prefill's logits and writes the same
KV rows (the padding touches only the scratch row); a bucket whose graph cannot be captured runs eagerly."""

import logging

import pytest
import torch

from worker.dispatch import DeviceBin
from worker.engine.prefill_graphs import Bucket, PrefillGraphs, seq_buckets, token_buckets
from worker.engine.runner import ModelRunner
from worker.model.kv_cache import KVCache

CAPACITY = 256


def _bin(seq_lens: list[int], vocab: int, *, align: int = 8, seed: int = 0) -> DeviceBin:
    """A packed bin as the dispatcher builds it: each span padded to `align`, positions continuing over the pads."""
    gen = torch.Generator().manual_seed(seed)
    ids, pos, cu, last = [], [], [0], []
    for n in seq_lens:
        span = -(-n // align) * align
        ids += torch.randint(1, vocab, (n,), generator=gen).tolist() + [0] * (span - n)
        pos += list(range(span))
        last.append(cu[-1] + n - 1)
        cu.append(cu[-1] + span)
    i32 = (lambda x: torch.tensor(x, dtype=torch.int32))  # noqa: E731
    return DeviceBin(i32(ids), i32(pos), i32(cu), i32(seq_lens), i32(last), num_real_tokens=sum(seq_lens), ready=None)


def _tape(model, seed: int = 1) -> KVCache:
    kv = KVCache.allocate(model.cfg, CAPACITY, torch.float32, "cpu")
    gen = torch.Generator().manual_seed(seed)
    for t in kv.k + kv.v:  # earlier prompts' rows: a cached head must be read from here
        t.copy_(torch.randn(t.shape, generator=gen))
    return kv


def _spans(b: DeviceBin) -> int:
    return int((b.cu_seqlens[1:] - b.cu_seqlens[:-1]).max())


def test_token_buckets_pad_a_bin_by_at_most_an_eighth():
    sizes = token_buckets(5000)
    assert sizes[0] == 128 and sizes[-1] == 5000 and list(sizes) == sorted(set(sizes))
    for tokens in range(1, 5001, 7):
        bucket = next(s for s in sizes if s >= tokens)
        assert bucket == 128 if tokens <= 128 else bucket - tokens <= tokens / 8


def test_seq_buckets_always_leave_room_for_a_padding_sequence():
    assert seq_buckets(8) == (2, 4, 8, 9)
    assert seq_buckets(1024)[-1] == 1025


def test_bucket_for_rounds_each_dimension_up_and_refuses_a_bin_past_the_largest(tiny_model):
    graphs = PrefillGraphs(tiny_model, _tape(tiny_model), torch.device("cpu"), max_tokens=1000, max_seqs=8,
                           max_seqlen_k=CAPACITY, use_graphs=False)
    assert graphs.bucket_for(300, 4, 200, True) == Bucket(320, 8, 256, True)
    assert graphs.bucket_for(100, 8, 100, False) == Bucket(128, 9, 128, False)  # span at least 128, at most the tokens
    assert graphs.bucket_for(1001, 1, 10, True) is None
    assert graphs.bucket_for(10, 9, 10, True) is None


@pytest.mark.parametrize("lens,prefix_lens", [([13, 30, 5], None), ([13, 30, 5], [16, 0, 40]), ([13, 30, 5, 20], None)],
                         ids=["from-zero", "through-the-tape", "a-power-of-two-of-sequences"])
def test_a_padded_bin_gives_the_unpadded_prefill_and_writes_the_same_rows(tiny_model, lens, prefix_lens):
    b = _bin(lens, tiny_model.cfg.vocab_size)
    starts = [0, 80, 160, 200][:len(lens)]
    plain_kv, padded_kv = _tape(tiny_model), _tape(tiny_model)
    want = ModelRunner(tiny_model, plain_kv, "cpu").prefill_bin(b, starts, _spans(b), 80, prefix_lens)
    graphs = PrefillGraphs(tiny_model, padded_kv, torch.device("cpu"), max_tokens=1000, max_seqs=8,
                           max_seqlen_k=CAPACITY, use_graphs=False)
    bucket = graphs.bucket_for(b.input_ids.shape[0], len(lens), _spans(b), prefix_lens is None)
    assert bucket.tokens > b.input_ids.shape[0] and bucket.seqs > len(lens)  # there is padding of both kinds
    got = graphs.run(b, bucket, starts, prefix_lens)
    assert got.shape == want.shape
    torch.testing.assert_close(got, want, rtol=1e-4, atol=1e-4)
    for mine, theirs in zip(padded_kv.k + padded_kv.v, plain_kv.k + plain_kv.v):  # the scratch row aside
        torch.testing.assert_close(mine, theirs, rtol=1e-4, atol=1e-4)


def test_the_tail_of_an_earlier_larger_bin_does_not_leak_into_a_smaller_one(tiny_model):
    graphs = PrefillGraphs(tiny_model, _tape(tiny_model), torch.device("cpu"), max_tokens=1000, max_seqs=8,
                           max_seqlen_k=CAPACITY, use_graphs=False)
    big, small = _bin([60, 60, 60, 50], tiny_model.cfg.vocab_size, seed=3), _bin([9, 4], tiny_model.cfg.vocab_size)
    fresh = graphs.run(small, graphs.bucket_for(small.input_ids.shape[0], 2, _spans(small), True), [0, 40], None).clone()
    graphs.run(big, graphs.bucket_for(big.input_ids.shape[0], 4, _spans(big), True), [0, 64, 128, 192], None)
    kv_before = [t.clone() for t in graphs.kv.k]
    after = graphs.run(small, graphs.bucket_for(small.input_ids.shape[0], 2, _spans(small), True), [0, 40], None)
    torch.testing.assert_close(after, fresh)
    for layer, before in enumerate(kv_before):  # only the small bin's own rows were written
        changed = (graphs.kv.k[layer] != before).flatten(1).any(1).nonzero().flatten().tolist()
        assert set(changed) <= set(range(0, 9)) | set(range(40, 44))


def test_a_bucket_whose_graph_cannot_be_captured_runs_eagerly_from_then_on(tiny_model, caplog):
    b = _bin([13, 30], tiny_model.cfg.vocab_size)
    runner = ModelRunner(tiny_model, _tape(tiny_model), "cpu", largest_bin=(1000, 8))
    assert runner.prefill_step is None  # no graphs on CPU
    want = runner.prefill_bin(b, [0, 80], _spans(b), 30)
    runner.prefill_step = PrefillGraphs(tiny_model, runner.kv, torch.device("cpu"), max_tokens=1000, max_seqs=8,
                                        max_seqlen_k=CAPACITY, use_graphs=False)
    runner.prefill_step.use_graphs = True  # no CUDA here: its capture fails, as an out-of-memory one would
    with caplog.at_level(logging.WARNING, logger="worker.engine.prefill_graphs"):
        got = runner.prefill_bin(b, [0, 80], _spans(b), 30)
    torch.testing.assert_close(got, want, rtol=1e-4, atol=1e-4)
    bucket = runner.prefill_step.bucket_for(b.input_ids.shape[0], 2, _spans(b), True)
    assert not runner.prefill_step.serves(bucket)
    assert any("runs eagerly" in r.getMessage() for r in caplog.records)
    assert runner.prefill_step._graphs == {}


class _Replayed:
    """Stands in for a captured graph on CPU: replaying runs the captured body again."""

    def __init__(self, body) -> None:
        self.replay = body


def test_the_largest_buckets_are_captured_first_and_then_replayed(tiny_model, monkeypatch):
    """capture_largest (the worker's start-up, the probe's held graphs) captures the largest bucket
    from zero and through the tape, once; a bin of that bucket then replays its capture and gives the
    eager prefill's logits. The capture itself is faked (no CUDA here), the buffers and bucket are real."""
    from worker.engine import prefill_graphs

    captured = []

    def fake_capture(device, pool, warm_up, body, warm_ups=1):
        warm_up()
        body()
        captured.append(body)
        return _Replayed(body)

    monkeypatch.setattr(prefill_graphs, "capture_graph", fake_capture)
    monkeypatch.setattr(torch.cuda, "graph_pool_handle", lambda: (0, 1))
    graphs = PrefillGraphs(tiny_model, _tape(tiny_model), torch.device("cpu"), max_tokens=200, max_seqs=4,
                           max_seqlen_k=CAPACITY, use_graphs=False)
    graphs.use_graphs = True
    assert graphs.capture_largest() == 2
    assert set(graphs._graphs) == {Bucket(200, 5, 200, True), Bucket(200, 5, 200, False)}
    assert graphs.capture_largest() == 2 and len(captured) == 2  # already held: not captured again
    b = _bin([129, 19, 19, 9], tiny_model.cfg.vocab_size)  # 200 tokens with the alignment pads
    bucket = graphs.bucket_for(b.input_ids.shape[0], 4, _spans(b), True)
    assert bucket == Bucket(200, 5, 200, True)
    starts = [0, 136, 160, 184]
    want = ModelRunner(tiny_model, _tape(tiny_model), "cpu").prefill_bin(b, starts, _spans(b), _spans(b))
    got = graphs.run(b, bucket, starts, None)
    assert len(captured) == 2  # the run replayed the capture
    torch.testing.assert_close(got, want, rtol=1e-4, atol=1e-4)


def test_prefill_graphs_only_when_the_variable_asks_for_them():
    from worker.engine.runner import wants_prefill_graphs

    assert wants_prefill_graphs("1")
    assert not wants_prefill_graphs(None) and not wants_prefill_graphs("") and not wants_prefill_graphs("0")
    with pytest.raises(ValueError, match="TELESUM_PREFILL_GRAPHS must be 0 or 1, not 'yes'"):
        wants_prefill_graphs("yes")
