"""GPU check of the engine (run by hand on a CUDA host; not collected by pytest).

Same random weights (SmolLM2 shape, bf16): torch_fa2 packed vs torch_fa2 solo vs sdpa packed,
through the real BinDispatcher (pinned slots, side-stream copies); prompts arriving in waves while
others decode, with mixed steps vs separate prefill and decode steps; then a Summarizer-free docs/s
figure for continuous batching. Prints JSON lines.
"""

from __future__ import annotations

import json
import random
import sys
import time

import torch

from worker.dispatch import BinDispatcher
from worker.engine.engine import Engine
from worker.engine.kv_arena import KVArena
from worker.engine.runner import ModelRunner
from worker.engine.sequence import SamplingParams
from worker.engine.step_trace import StepTrace
from worker.model import ModelConfig, random_model

SMOL = dict(vocab_size=49152, hidden_size=576, intermediate_size=1536, num_layers=30, num_heads=9,
            num_kv_heads=3, head_dim=64, rope_theta=100000.0, max_position_embeddings=8192,
            tie_word_embeddings=True, eos_token_ids=())


def run(loaded, prompts, max_new, budget, rows, *, mixed=True, waves=1):
    """waves > 1: the prompts arrive in that many waves, a few engine steps apart (later ones while
    earlier ones decode)."""
    dispatcher = BinDispatcher(budget, alignment=16, num_slots=3, max_seqs_per_bin=512,
                               queue_capacity_tokens=1 << 24)
    arena = KVArena(loaded.config, rows, dtype=loaded.dtype, device=loaded.device)
    engine = Engine(ModelRunner(loaded.model, arena.cache, loaded.device), dispatcher, arena.slabs,
                    eos_ids=(), max_context=loaded.config.max_position_embeddings, mixed_steps=mixed)
    dispatcher.start()
    torch.cuda.synchronize()
    t0 = time.perf_counter()
    size = -(-len(prompts) // waves)
    trace = StepTrace()
    engine.step_observers.append(trace.observe)
    seqs, steps = [], 0
    for i in range(0, len(prompts), size):
        seqs += [engine.add(p, SamplingParams(max_new_tokens=max_new)) for p in prompts[i:i + size]]
        for _ in range(4 if i + size < len(prompts) else 0):
            engine.step()
            steps += 1
    while not all(s.is_done for s in seqs):
        engine.step()
        steps += 1
    torch.cuda.synchronize()
    wall = time.perf_counter() - t0
    dispatcher.close()
    errors = [repr(s.error) for s in seqs if s.error]
    assert arena.slabs.num_used_rows == 0
    kinds = {k: v["steps"] for k, v in trace.summary().items() if isinstance(v, dict)}
    return [s.output for s in seqs], wall, kinds, errors


def main() -> None:
    cfg = ModelConfig.tiny(**SMOL)
    rng = random.Random(0)
    prompts = [[rng.randrange(3, 49152) for _ in range(rng.randint(20, 1500))] for _ in range(48)]
    fa2 = random_model(cfg, device="cuda", backend="torch_fa2", seed=0)
    sdpa = random_model(cfg, device="cuda", backend="sdpa", seed=0)
    if "--mixed-only" not in sys.argv:
        packed_checks(fa2, sdpa, prompts)
    mixed_checks(fa2, sdpa, prompts)
    if "--mixed-only" not in sys.argv:
        throughput_check(fa2, rng)
    sys.stdout.flush()


def packed_checks(fa2, sdpa, prompts) -> None:
    same = lambda a, b: sum(x == y for x, y in zip(a, b))  # noqa: E731
    packed, wall, steps, err = run(fa2, prompts, 16, 8192, 200_000)
    print(json.dumps({"check": "fa2_packed", "wall_s": round(wall, 3), "steps": steps, "errors": err[:3]}))
    solo = [run(fa2, [p], 16, 8192, 20_000)[0][0] for p in prompts[:12]]
    ref, _, _, err2 = run(sdpa, prompts, 16, 8192, 200_000)
    first = lambda a, b: sum(x[:1] == y[:1] for x, y in zip(a, b))  # noqa: E731
    print(json.dumps({"check": "packed_vs_solo_fa2", "equal_seqs": same(packed[:12], solo), "of": 12,
                      "equal_first_token": first(packed[:12], solo)}))
    print(json.dumps({"check": "fa2_vs_sdpa_packed", "equal_seqs": same(packed, ref), "of": len(prompts),
                      "equal_first_token": first(packed, ref), "sdpa_errors": err2[:3]}))


def mixed_checks(fa2, sdpa, prompts) -> None:
    """Waves arriving while earlier prompts decode: mixed steps vs separate steps vs the sdpa reference."""
    same = lambda a, b: sum(x == y for x, y in zip(a, b))  # noqa: E731
    mixed, _, steps_m, err_m = run(fa2, prompts, 16, 2048, 200_000, mixed=True, waves=6)
    apart, _, steps_a, err_a = run(fa2, prompts, 16, 2048, 200_000, mixed=False, waves=6)
    ref_w, _, _, _ = run(sdpa, prompts, 16, 2048, 200_000, mixed=False, waves=6)
    head = lambda a, b, n: sum(x[:n] == y[:n] for x, y in zip(a, b))  # noqa: E731
    print(json.dumps({"check": "mixed_vs_separate_steps_fa2", "equal_seqs": same(mixed, apart), "of": len(prompts),
                      "equal_first_4": head(mixed, apart, 4), "steps": [steps_m, steps_a],
                      "errors": (err_m + err_a)[:3]}))
    print(json.dumps({"check": "waves_vs_sdpa", "mixed_equal": same(mixed, ref_w), "separate_equal": same(apart, ref_w),
                      "of": len(prompts), "mixed_equal_first_4": head(mixed, ref_w, 4),
                      "separate_equal_first_4": head(apart, ref_w, 4)}))


def throughput_check(fa2, rng) -> None:
    """Continuous batching throughput: 400 prompts, 128 new tokens."""
    many = [[rng.randrange(3, 49152) for _ in range(rng.choice([rng.randint(60, 170), rng.randint(2300, 2600)]))]
            for _ in range(400)]
    _, wall, steps, err = run(fa2, many, 128, 65536, 600_000)
    print(json.dumps({"check": "throughput_smollm2_shape", "docs": 400, "new_tokens": 128, "wall_s": round(wall, 2),
                      "docs_per_s": round(400 / wall, 2), "steps": steps, "errors": err[:3]}))
    sys.stdout.flush()


if __name__ == "__main__":
    main()
