"""The start-up's tokenizer phase, before and after the tokenizer cache: each way in a fresh process
(torch imported first, as the commands have it by then; transformers' imports counted, as a start pays
them), rounds interleaved, the median reported.

    python bench/tokenizer_load.py --out bench/results [--rounds 3] [--site DIR ...]

Cases: the embedded GGUF converted by transformers (every start before the cache; the first start
now), the same tokenizer read from the cache, and a tokenizer folder saved from it (what `--tokenizer
DIR` names) through AutoTokenizer (before) and through its class directly (now). `--site DIR` runs
every case again with DIR first on the path (another transformers version installed with `pip install
--target DIR`): the GPU host's transformers differs from this machine's.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

CASES = {
    "gguf_converted (before; first start now)": "load_tokenizer(gguf)",
    "gguf_from_cache (now)": "load_tokenizer(gguf)",
    "folder_autotokenizer (before)": "AutoTokenizer.from_pretrained(folder)",
    "folder_direct (now)": "load_tokenizer(folder)",
}
# Timed in the child: the load and the imports it needs, after torch (imported by the commands first).
CHILD = """
import json, sys, time
import torch
from pathlib import Path
gguf, folder = Path(sys.argv[1]), Path(sys.argv[2])
t = time.perf_counter()
if "AutoTokenizer" in sys.argv[3]:
    from transformers import AutoTokenizer
else:
    from worker.model.tokenizer import load_tokenizer
tok = eval(sys.argv[3])
import transformers
print(json.dumps({"s": time.perf_counter() - t, "vocab": len(tok), "transformers": transformers.__version__}))
"""


def run_case(case: str, gguf: Path, folder: Path, cache: Path, site: str | None) -> dict:
    env = {**os.environ, "TELESUM_CACHE_DIR": str(cache)}
    if site:
        env["PYTHONPATH"] = os.pathsep.join(p for p in (site, env.get("PYTHONPATH")) if p)
    if case.startswith("gguf_converted"):
        subprocess.run(["rm", "-rf", str(cache / "tokenizer")], check=True)
    out = subprocess.run([sys.executable, "-c", CHILD, str(gguf), str(folder), CASES[case]], env=env,
                         capture_output=True, text=True, check=True)
    return json.loads(out.stdout.strip().splitlines()[-1])


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--out", type=Path, required=True)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--site", action="append", default=[], help="another transformers, first on the path")
    args = ap.parse_args()

    from worker.model import embedded_model_path
    from worker.model.tokenizer import load_tokenizer

    gguf = embedded_model_path()
    work = Path(tempfile.mkdtemp(prefix="telesum-tokenizer-bench-"))
    folder = work / "folder"
    load_tokenizer(gguf).save_pretrained(folder)  # what `--tokenizer DIR` users have
    results: dict = {"command": "python " + " ".join(sys.argv), "date_utc": time.strftime("%Y-%m-%d %H:%M", time.gmtime()),
                     "machine": f"{os.cpu_count()} cores", "load_average_before": os.getloadavg()[0], "runs": {}}
    for site in [None, *args.site]:
        label = "installed" if site is None else site
        times: dict[str, list[float]] = {c: [] for c in CASES}
        version = None
        for _ in range(args.rounds):
            for case in CASES:  # in this order: the cached case reads what the converted one saved
                r = run_case(case, gguf, folder, work / "cache", site)
                times[case].append(round(r["s"], 3))
                version = r["transformers"]
        results["runs"][label] = {"transformers": version,
                                  "cases": {c: {"median_s": statistics.median(t), "runs_s": t} for c, t in times.items()}}
        print(label, version, {c: statistics.median(t) for c, t in times.items()}, flush=True)
    results["load_average_after"] = os.getloadavg()[0]
    args.out.mkdir(parents=True, exist_ok=True)
    (args.out / "tokenizer_load.json").write_text(json.dumps(results, indent=2) + "\n")
    chart(results, args.out / "tokenizer_load.png")


def chart(results: dict, path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    runs = results["runs"]
    fig, ax = plt.subplots(figsize=(9, 4.5))
    width = 0.8 / len(runs)
    for i, run in enumerate(runs.values()):
        medians = [run["cases"][c]["median_s"] for c in CASES]
        xs = [j + i * width for j in range(len(CASES))]
        ax.bar(xs, medians, width, label=f"transformers {run['transformers']}")
        for x, m in zip(xs, medians):
            ax.text(x, m, f"{m:.1f}", ha="center", va="bottom", fontsize=8)
    ax.set_xticks([j + width * (len(runs) - 1) / 2 for j in range(len(CASES))])
    ax.set_xticklabels([c.replace(" (", "\n(") for c in CASES], fontsize=8)
    ax.set_ylabel("seconds (fresh process, after torch)")
    ax.set_title(f"Tokenizer phase of a start, embedded SmolLM2 tokenizer ({results['machine']}, {results['date_utc']} UTC)")
    ax.legend()
    fig.tight_layout()
    fig.savefig(path, dpi=110)


if __name__ == "__main__":
    main()
