"""GPU check: `telesum worker` and `telesum summarize` build the same Summarizer by default, and it is
the fast one. Side by side in one run, on `short` records with 64 new tokens and the production
sampling: the Summarizer as each command builds it from default settings (budgets resolved for
the device, as the start-up banner reports them), and the worker's former default packing
(8,192-token bins, 64 sequences per bin) for comparison.

    python bench/gpu_check_defaults.py --out bench/results/gpu/gpu_check_defaults.json
    python bench/gpu_check_defaults.py --device cpu --model tiny --records 8 --out /tmp/d.json   # dry run
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from worker.commands.runtime import build_summarizer, load_model  # noqa: E402
from worker.settings.budgets import Budgets, resolve_budgets  # noqa: E402
from worker.settings.load import load_settings  # noqa: E402
from worker.commands.summarize import SECTIONS as SUMMARIZE_SECTIONS  # noqa: E402
from worker.samples import iter_generate  # noqa: E402


def measure(loaded, engine, budgets: Budgets, records, warmup: int) -> dict:
    summarizer = build_summarizer(engine, budgets, loaded)
    summarizer.start()
    try:
        list(summarizer.summarize_all(records[:warmup]))  # first-call and compile costs stay out
        t0 = time.perf_counter()
        results = list(summarizer.results_in_order(records, max_in_flight=4096))
        elapsed = time.perf_counter() - t0
    finally:
        summarizer.close(drain=False)
    failed = sum(isinstance(r, Exception) for _, r in results)
    return {"budgets": budgets.describe(), "records": len(records), "failed": failed,
            "seconds": round(elapsed, 2), "records_per_s": round(len(records) / elapsed, 1)}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--records", type=int, default=1500)
    parser.add_argument("--warmup", type=int, default=64)
    parser.add_argument("--device", default="auto")
    parser.add_argument("--model", default="embedded")
    parser.add_argument("--out", type=Path, required=True)
    args = parser.parse_args()
    env = {"TELESUM_DEVICE": args.device, "TELESUM_MODEL": args.model, "TELESUM_MAX_NEW_TOKENS": "64"}
    worker_settings = load_settings(None, env)
    summarize_settings = load_settings(None, env, sections=SUMMARIZE_SECTIONS)
    engine = worker_settings.settings.engine
    assert engine == summarize_settings.settings.engine
    loaded = load_model(engine)
    device = next(loaded.model.parameters()).device
    records = [r for r, _ in iter_generate(args.records + args.warmup, "short", seed=0)]
    warm, timed = records[:args.warmup], records[args.warmup:]
    rows = {}
    for name, loaded_settings in (("worker default", worker_settings), ("summarize default", summarize_settings)):
        budgets = resolve_budgets(loaded_settings, device.type)
        rows[name] = measure(loaded, engine, budgets, warm + timed, len(warm))
        print(f"{name:>26}: {rows[name]['records_per_s']:8.1f} records/s  ({rows[name]['budgets']})", flush=True)
    former = Budgets(8192, 64, None, {"token_budget": "former worker default", "max_seqs_per_bin": "former worker "
                                      "default", "kv_rows": "derived"})
    rows["former worker default"] = measure(loaded, engine, former, warm + timed, len(warm))
    print(f"{'former worker default':>26}: {rows['former worker default']['records_per_s']:8.1f} records/s", flush=True)
    out = {"device": str(device), "model": loaded.name, "max_new_tokens": 64, "profile": "short", "rows": rows}
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(out, indent=2) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
