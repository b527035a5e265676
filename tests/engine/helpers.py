"""Small factories shared by the engine tests."""

from __future__ import annotations

import random

import torch

from worker.engine.engine import Engine
from worker.engine.kv_arena import SlabAllocator
from worker.engine.prefix_reuse import PrefixReuse
from worker.engine.runner import ModelRunner
from worker.engine.sequence import SamplingParams, Sequence
from worker.model.attention import build_pass
from worker.model.kv_cache import KVCache

from tests.engine.conftest import FakeDispatcher


def make_engine(model, *, token_budget=64, capacity=2048, chunk_tokens=None, eos_ids=(),
                detokenize=None, alignment=8, seed=0, prefix_blocks=0, block_size=8,
                max_decode_seqs=None, mixed_steps=False, launch_ahead=None) -> Engine:
    """prefix_blocks > 0: a prefix cache of that many blocks after the `capacity` slab rows."""
    kv = KVCache.allocate(model.cfg, capacity + prefix_blocks * block_size, torch.float32, "cpu")
    prefix = (PrefixReuse(kv, first_row=capacity, num_blocks=prefix_blocks, block_size=block_size)
              if prefix_blocks else None)
    return Engine(ModelRunner(model, kv, "cpu"), FakeDispatcher(token_budget, alignment), SlabAllocator(capacity),
                  eos_ids=eos_ids, max_context=model.cfg.max_position_embeddings,
                  chunk_tokens=chunk_tokens, detokenize=detokenize, seed=seed, prefix_reuse=prefix,
                  max_decode_seqs=max_decode_seqs, mixed_steps=mixed_steps, launch_ahead=launch_ahead)


def run_until_done(engine: Engine, seqs: list[Sequence], max_steps: int = 10_000) -> None:
    for _ in range(max_steps):
        if all(s.is_done for s in seqs):
            return
        engine.step()
    raise AssertionError("engine did not finish in time")


def generate(model, prompts: list[list[int]], max_new: int | list[int] = 8, **kw) -> list[list[int]]:
    """Greedy outputs of all prompts submitted together."""
    engine = make_engine(model, **kw)
    news = max_new if isinstance(max_new, list) else [max_new] * len(prompts)
    seqs = [engine.add(p, SamplingParams(max_new_tokens=n)) for p, n in zip(prompts, news)]
    run_until_done(engine, seqs)
    assert engine.scheduler.slabs.num_used_rows == 0
    for s in seqs:
        assert s.error is None, s.error
    return [s.output for s in seqs]


@torch.inference_mode()
def reference_greedy(model, prompt: list[int], max_new: int) -> list[int]:
    """No-cache reference: recompute the whole sequence from scratch for every new token."""
    tokens = list(prompt)
    out = []
    for _ in range(max_new):
        kv = KVCache.allocate(model.cfg, len(tokens), torch.float32, "cpu")
        meta, pos = build_pass([len(tokens)], [0], [0])
        logits = model(torch.tensor(tokens), pos, meta, kv, torch.tensor([len(tokens) - 1]))
        nxt = int(logits.argmax(-1))
        out.append(nxt)
        tokens.append(nxt)
    return out


def random_prompts(n: int, lo: int, hi: int, seed: int, vocab: int = 256) -> list[list[int]]:
    rng = random.Random(seed)
    return [[rng.randrange(3, vocab) for _ in range(rng.randint(lo, hi))] for _ in range(n)]
