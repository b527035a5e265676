"""Sampling: greedy rows stay argmax, top-p keeps the nucleus only, seeded draws repeat, the
repetition penalty moves only tokens already generated."""

import pytest
import torch

from worker.engine.sampling import SamplingBatch, _top_p_filter, apply_repetition_penalty, sample
from worker.engine.sequence import SamplingParams


def test_top_p_filter_keeps_smallest_nucleus_reaching_p():
    probs = torch.tensor([[0.5, 0.3, 0.15, 0.05]])
    kept = _top_p_filter(probs, torch.tensor([0.7]))
    assert torch.equal(kept, probs * torch.tensor([1.0, 1.0, 0.0, 0.0]))
    assert torch.equal(_top_p_filter(probs, torch.tensor([1.0])), probs)
    assert (_top_p_filter(probs, torch.tensor([1e-9])) > 0).sum() == 1  # the top token always stays


def test_sample_mixed_rows_greedy_rows_take_argmax_and_draws_follow_probs():
    logits = torch.log(torch.tensor([[0.1, 0.6, 0.3]] * 4000))
    temps = torch.tensor([0.0] + [1.0] * 3999)
    gen = torch.Generator().manual_seed(0)
    out = sample(logits, temps, torch.ones(4000), gen)
    assert out[0] == 1
    freq = torch.bincount(out[1:], minlength=3).float() / 3999
    assert torch.allclose(freq, torch.tensor([0.1, 0.6, 0.3]), atol=0.03)


def test_sampling_batch_same_seed_same_tokens_and_all_greedy_is_argmax():
    logits = torch.randn(8, 50, generator=torch.Generator().manual_seed(1))
    batch = SamplingBatch([0.8] * 8, [0.9] * 8, "cpu")
    a = batch.sample(logits, torch.Generator().manual_seed(7))
    b = batch.sample(logits, torch.Generator().manual_seed(7))
    assert torch.equal(a, b)
    assert torch.equal(SamplingBatch([0.0] * 8, [1.0] * 8, "cpu").sample(logits, None), logits.argmax(-1))


def test_apply_repetition_penalty_seen_tokens_scaled_by_sign_others_untouched():
    logits = torch.tensor([[2.0, -1.0, 0.5, 3.0], [1.0, 1.0, -2.0, 0.0]])
    history = torch.tensor([[0, 1, 0], [2, -1, -1]])  # row 0 saw 0 (twice) and 1; row 1 saw 2
    out = apply_repetition_penalty(logits, history, torch.tensor([2.0, 1.5]))
    assert torch.equal(out, torch.tensor([[1.0, -2.0, 0.5, 3.0], [1.0, 1.0, -3.0, 0.0]]))
    assert torch.equal(logits[0], torch.tensor([2.0, -1.0, 0.5, 3.0]))  # input not modified


def test_apply_repetition_penalty_padding_does_not_penalise_token_zero():
    logits = torch.tensor([[2.0, 1.0, 0.5]])
    out = apply_repetition_penalty(logits, torch.tensor([[1, -1, -1]]), torch.tensor([4.0]))
    assert torch.equal(out, torch.tensor([[2.0, 0.25, 0.5]]))


def test_sampling_batch_penalty_breaks_greedy_repeat_and_penalty_one_is_plain_argmax():
    logits = torch.tensor([[0.0, 3.0, 2.0], [0.0, 3.0, 2.0]])
    batch = SamplingBatch([0.0, 0.0], [1.0, 1.0], "cpu", [2.0, 1.0], [[1, 1], [1, 1]])
    assert batch.sample(logits, None).tolist() == [2, 1]  # only the penalised row moves off token 1
    plain = SamplingBatch([0.0, 0.0], [1.0, 1.0], "cpu", [1.0, 1.0], [[1], [1]])
    assert plain.penalties is None and torch.equal(plain.sample(logits, None), logits.argmax(-1))


def test_sampling_batch_penalty_without_histories_raises():
    with pytest.raises(ValueError, match="history"):
        SamplingBatch([0.0], [1.0], "cpu", [1.3], None)


def test_sampling_params_non_positive_repetition_penalty_raises():
    with pytest.raises(ValueError, match="repetition_penalty"):
        SamplingParams(8, repetition_penalty=0.0)
    assert SamplingParams(8).repetition_penalty == 1.0  # off unless asked for
