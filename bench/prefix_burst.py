"""Prefix reuse on a cold burst, on CPU: records submitted at once to a Summarizer whose cache is
empty, with prompts allowed to wait for a head another prompt is prefilling (the default) and without.

    python bench/prefix_burst.py [--records 300] [--token-budget 4096] [--out bench/results/prefix_burst.json]

A tiny random-weight model (speed and the share do not depend on weights) with the embedded model's
real tokenizer and `telesum produce`'s `short` records; reports the share of prompt tokens served
from the cache and the wall time of each run.
"""

from __future__ import annotations

import argparse
import json
import time
from pathlib import Path
from types import SimpleNamespace

import torch

from worker.model.attention import SdpaBackend
from worker.model.config import ModelConfig
from worker.model.llama import LlamaModel
from worker.model.loader import embedded_model_path
from worker.model.tokenizer import load_tokenizer
from worker.summarizer.preprocess import Preprocessor
from worker.settings.budgets import Budgets
from worker.settings.sections import EngineSettings
from worker.summarizer.summarizer import Summarizer
from worker.samples import generate


def run(loaded, records, *, token_budget: int, wait: bool) -> dict:
    s = Summarizer(loaded, EngineSettings(max_new_tokens=4, max_record_tokens=0),
                   Budgets(token_budget, 16, 600_000, {}), preprocessor=Preprocessor(loaded.tokenizer, 0))
    if not wait:
        s.prefix.max_claim_tokens = 0  # no prompt claims a head, so none waits
    s.start()
    try:
        t0 = time.perf_counter()
        done = sum(1 for _ in s.summarize_all(records))
        seconds = time.perf_counter() - t0
        stats = s.prefix.stats()
    finally:
        s.close()
    return {"records": done, "seconds": seconds, "hit_token_share": stats["hit_token_share"],
            "hits": stats["hits"], "lookups": stats["lookups"]}


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--records", type=int, default=300)
    ap.add_argument("--token-budget", type=int, default=4096)
    ap.add_argument("--out", type=Path)
    args = ap.parse_args()
    tokenizer = load_tokenizer(embedded_model_path())
    cfg = ModelConfig.tiny(vocab_size=len(tokenizer), max_position_embeddings=8192, eos_token_ids=(2,))
    torch.manual_seed(0)
    loaded = SimpleNamespace(model=LlamaModel(cfg, SdpaBackend()).eval(), config=cfg, tokenizer=tokenizer,
                             name="tiny-random")
    records = [r for r, _ in generate(args.records, "short", seed=1)]
    res = {"date": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()), "device": "cpu",
           "command": f"python bench/prefix_burst.py --records {args.records} --token-budget {args.token_budget}",
           "without_wait": run(loaded, records, token_budget=args.token_budget, wait=False),
           "with_wait": run(loaded, records, token_budget=args.token_budget, wait=True)}
    text = json.dumps(res, indent=2)
    print(text)
    if args.out:
        args.out.write_text(text + "\n")


if __name__ == "__main__":
    main()
