"""Regex time on long lines (issue 27: no single message can stop the worker).

    python bench/regex_scan.py --out bench/results [--label after] [--cap 60] [--tree DIR] [--no-bound]
                               [--before FILE]

1. Every module-level regex of worker.facts, worker.inputs and worker.prompts (also those held in a
   module-level tuple, list or dict) searched in adversarial strings of 10,000 and 40,000 characters:
   the time ratio is ~4 for a linear search, ~16 for a quadratic one. A search slower than 0.5 s at
   10k is not run at 40k (projected 16×).
2. `extract_facts` of one syslog record holding a single 50 MB line (words; one 'x' run) and of a
   64 KiB window of 2 KB syslog lines, each in a child process stopped after `--cap` seconds
   (`--no-bound`: with MAX_FACT_LINE_CHARS lifted, the regexes alone).

Writes regex_scan[.LABEL].json and .png under --out (no LABEL for `after`); the chart overlays
`--before FILE`, the JSON of an earlier run (e.g. of the code before the fix: `--tree DIR`, with DIR
from `git archive REV worker | tar -x -C DIR`). Results: bench/results/regex_scan.md.
Times only, no assertions: the tests check behaviour.
"""

from __future__ import annotations

import argparse
import importlib
import json
import os
import pkgutil
import platform
import random
import re
import subprocess
import sys
import time
from datetime import datetime, timezone
from pathlib import Path

PACKAGES = ("worker.facts", "worker.inputs", "worker.prompts")
SIZES = (10_000, 40_000)
SLOW_AT_10K_S = 0.5  # beyond this the 40k search would take ~8 s or more: projected, not run
NOISE_S = 0.005      # ratios of searches faster than this at 40k are timer noise, not flagged
_WORDS = ["link", "down", "ADJ", "BGP-5", "x_y", "10.0.0.1", "%", "-", ":", "a=b"]


def adversarial(n: int) -> dict[str, str]:
    """Strings of n characters that make a backtracking regex rescan: long runs of one class."""
    rng = random.Random(0)
    words = " ".join(rng.choice(_WORDS) for _ in range(n // 4))[:n]
    return {"x": "x" * n, "X": "X" * n, "digits": "1" * n, "spaces": " " * n, "words": words,
            "punct": "a-" * (n // 2), "colons": "a:" * (n // 2), "eq": "a=" * (n // 2), "dots": "1." * (n // 2),
            "brackets": "[" * n}


def _use_tree_code(tree: Path | None) -> str:
    """Code that makes `import worker` read `tree`, ahead of the editable install's import hook."""
    if tree is None:
        return ""
    return (f"import sys; sys.path.insert(0, {str(tree.resolve())!r}); "
            "sys.meta_path[:] = [f for f in sys.meta_path if 'editable' not in repr(f).lower()]")


def module_patterns() -> list[tuple[str, re.Pattern]]:
    found = []
    for package_name in PACKAGES:
        package = importlib.import_module(package_name)
        for info in pkgutil.iter_modules(package.__path__):
            module = importlib.import_module(f"{package_name}.{info.name}")
            for name, value in vars(module).items():
                if isinstance(value, re.Pattern):
                    found.append((f"{module.__name__}.{name}", value))
                elif isinstance(value, (tuple, list, dict)) and not name.startswith("__"):
                    items = value.items() if isinstance(value, dict) else enumerate(value)
                    for key, item in items:
                        item = item[-1] if isinstance(item, tuple) and item else item  # (name, pattern) pairs
                        if isinstance(item, re.Pattern):
                            found.append((f"{module.__name__}.{name}[{key!r}]", item))
    seen, unique = set(), []
    for name, pattern in found:  # a pattern re-exported under another module's name is timed once
        if id(pattern) not in seen:
            seen.add(id(pattern))
            unique.append((name, pattern))
    return unique


def _search_time(pattern: re.Pattern, text: str, rounds: int) -> float:
    best = float("inf")
    for _ in range(rounds):
        start = time.perf_counter()
        pattern.search(text)
        best = min(best, time.perf_counter() - start)
        if best > 0.05:  # slow enough to measure once
            break
    return best


def scan_patterns() -> list[dict]:
    texts = {n: adversarial(n) for n in SIZES}
    rows = []
    for name, pattern in module_patterns():
        for kind in texts[SIZES[0]]:
            small = _search_time(pattern, texts[SIZES[0]][kind], 3)
            large = _search_time(pattern, texts[SIZES[1]][kind], 3) if small < SLOW_AT_10K_S else None
            retimed = large is not None and large > NOISE_S and large > 8 * small
            if retimed:  # a ratio this high on a shared machine is often another process: measured again
                small, large = _search_time(pattern, texts[SIZES[0]][kind], 5), _search_time(pattern, texts[SIZES[1]][kind], 5)
            rows.append({"pattern": name, "text": kind, "t_10k_s": small, "t_40k_s": large, "retimed": retimed,
                         "ratio": (large / small if large is not None and small > 0 else None),
                         "projected_40k_s": None if large is not None else small * 16})
    return rows


# Run in a child so that a record that never finishes is stopped at the cap.
CHILD = """
import json, random, sys, time
exec(sys.argv[3])
from worker.facts import extract_facts
from worker.messages import TelemetryRecord
case = sys.argv[1]
if sys.argv[2] == "off":  # the regexes alone: the line bound of worker.facts.bounds lifted
    import worker.facts.bounds as bounds
    bounds.MAX_FACT_LINE_CHARS = 10**12
head = "<131>1 2026-11-29T10:00:05.250Z gnb-0042 ngap 77 LINKDOWN - "
words = ["link", "down", "ADJ", "BGP-5", "x_y", "10.0.0.1", "%", "-", ":", "a=b", "peer", "AMF-02"]
rng = random.Random(0)
def line(n):
    out, size = [], 0
    while size < n:
        w = rng.choice(words); out.append(w); size += len(w) + 1
    return (head + " ".join(out))[:n]
if case == "50MB line, words":
    body = line(50_000_000)
elif case == "50MB line, one x run":
    body = head + "x" * (50_000_000 - len(head))
else:  # 64 KiB window of 2 KB lines
    body = "\\n".join(line(2048) for _ in range(65536 // 2049))
record = TelemetryRecord(id="bench", kind="syslog", body=body, timestamp="2026-11-29T10:00:06Z")
start = time.perf_counter()
facts = extract_facts(record)
print(json.dumps({"seconds": time.perf_counter() - start, "chars": len(body), "events": facts.event_count}))
"""
FACT_CASES = ("50MB line, words", "50MB line, one x run", "64 KiB window of 2 KB lines")


def time_facts(cap_s: float, bound: str, tree: Path | None) -> list[dict]:
    rows = []
    for case in FACT_CASES:
        try:
            done = subprocess.run([sys.executable, "-c", CHILD, case, bound, _use_tree_code(tree)], capture_output=True, text=True,
                                  timeout=cap_s, check=True)
            rows.append({"case": case, **json.loads(done.stdout), "finished": True})
        except subprocess.TimeoutExpired:
            rows.append({"case": case, "seconds": None, "finished": False, "stopped_after_s": cap_s})
    return rows


def chart(result: dict, before: dict | None, path: Path) -> None:
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, (left, right) = plt.subplots(1, 2, figsize=(13, 5.5))
    runs = [(before, "tab:red"), (result, "tab:blue")] if before else [(result, "tab:blue")]
    for run, colour in runs:
        xs = [r["t_10k_s"] for r in run["patterns"]]
        ys = [r["t_40k_s"] if r["t_40k_s"] is not None else r["projected_40k_s"] for r in run["patterns"]]
        left.scatter(xs, ys, s=9, alpha=0.6, color=colour, label=f"{run['label']} (projected: >{SLOW_AT_10K_S} s at 10k)")
    low, high = 1e-7, 1e3
    for factor, style in ((4, "--"), (16, ":")):
        left.plot([low, high], [low * factor, high * factor], style, color="grey", label=f"{factor}× (linear)" if factor == 4
                  else f"{factor}× (quadratic)")
    left.set(xscale="log", yscale="log", xlim=(low, 1e2), ylim=(low, high), xlabel="search, 10,000 chars (s)",
             ylabel="search, 40,000 chars (s)", title="module-level regexes × adversarial strings")
    left.legend(fontsize=8)
    labels = list(FACT_CASES)
    width = 0.4
    for offset, (run, colour) in zip((-width / 2, width / 2) if before else (0,), runs):
        if run is None:
            continue
        values = [next((r["seconds"] if r["finished"] else r["stopped_after_s"]) for r in run["facts"] if r["case"] == c)
                  for c in labels]
        bars = right.bar([i + offset for i in range(len(labels))], values, width, color=colour, label=run["label"])
        for bar, r in zip(bars, [next(r for r in run["facts"] if r["case"] == c) for c in labels]):
            right.annotate(f"stopped at {r['stopped_after_s']:.0f} s" if not r["finished"] else f"{r['seconds']:.2f} s",
                           (bar.get_x() + bar.get_width() / 2, bar.get_height()), ha="center", va="bottom", fontsize=8)
    right.set_xticks(range(len(labels)), labels, fontsize=8)
    right.set(yscale="log", ylabel="extract_facts (s)", title="facts of one record")
    right.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(path, dpi=110)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--out", type=Path, required=True)
    parser.add_argument("--label", default="after")
    parser.add_argument("--cap", type=float, default=60.0, help="seconds before a facts case is stopped")
    parser.add_argument("--no-bound", action="store_true", help="lift MAX_FACT_LINE_CHARS for the facts cases")
    parser.add_argument("--tree", type=Path, help="import worker from this source tree (e.g. `git archive REV worker`)")
    parser.add_argument("--before", type=Path, help="JSON of an earlier run to overlay on the chart")
    args = parser.parse_args()
    exec(_use_tree_code(args.tree))
    started = datetime.now(timezone.utc)
    load_before = os.getloadavg()
    patterns = scan_patterns()
    facts = time_facts(args.cap, "off" if args.no_bound else "on", args.tree)
    flagged = [r for r in patterns if r["t_40k_s"] is None or (r["t_40k_s"] > NOISE_S and r["ratio"] > 8)]
    result = {
        "command": "python " + " ".join(sys.argv),
        "cwd": os.getcwd(),
        "worker_from": str(Path(importlib.import_module("worker").__file__).parent),
        "label": args.label,
        "date_utc": started.strftime("%Y-%m-%d %H:%M UTC"),
        "machine": f"{platform.machine()}, {os.cpu_count()} cores, Python {platform.python_version()}",
        "load_average_before": load_before[0],
        "load_average_after": os.getloadavg()[0],
        "patterns_timed": len({r["pattern"] for r in patterns}),
        "superlinear": [f"{r['pattern']} on {r['text']}" for r in flagged],
        "slowest_40k": max(patterns, key=lambda r: r["t_40k_s"] if r["t_40k_s"] is not None else r["projected_40k_s"]),
        "facts": facts,
        "patterns": patterns,
    }
    args.out.mkdir(parents=True, exist_ok=True)
    stem = "regex_scan" if args.label == "after" else f"regex_scan.{args.label}"
    (args.out / f"{stem}.json").write_text(json.dumps(result, indent=1) + "\n")
    before = json.loads(args.before.read_text()) if args.before else None
    chart(result, before, args.out / f"{stem}.png")
    print(json.dumps({k: result[k] for k in ("label", "patterns_timed", "superlinear", "slowest_40k", "facts")}, indent=1))


if __name__ == "__main__":
    main()
