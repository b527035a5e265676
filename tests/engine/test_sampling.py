"""Sampling: greedy rows stay argmax, top-p keeps the nucleus only, seeded draws repeat."""

import torch

from worker.engine.sampling import SamplingBatch, _top_p_filter, sample


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
