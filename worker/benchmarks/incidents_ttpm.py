"""The reference for a learned alarm cause graph (issue 38): gCastle's TTPM (topological Hawkes process,
Cai et al. 2021), used as its documentation shows, on the same training alarms as `telesum bench
incidents --learn`.

Training alarms: every alarm of `Alarm.csv` outside the busiest 2 h (the window that benchmark replays;
`incidents_broker.busiest`): rows whose start time lies in [the window's first start, its last start] are
left out. TTPM learns from the event table (event = alarm type, timestamp = start, node = device) on the
topology `Topology.npy`; the learned directed graph is scored against the experts' `DAG.npy`
(precision, recall and F1 of directed edges, the diagonal excluded).

gCastle is an optional, heavy dependency (it imports torch, pandas, networkx, matplotlib and
scikit-learn; its package does not declare torch, yet `castle.algorithms` imports it), so it is imported
only inside `learn_ttpm`, and this module imports without it. It is the project's extra `ttpm`
(`pip install -e '.[ttpm]'`: gcastle 1.0.4 adds pandas, scipy and scikit-learn and leaves torch as it
is). The results committed in bench/results/incidents_ttpm.json came from a separate virtual environment
beside the project's, with the repository on the path (the same packages):

    python3 -m venv /tmp/ttpm-venv
    /tmp/ttpm-venv/bin/pip install gcastle==1.0.4 torch msgspec drain3 'kafka-python[crc32c,lz4,snappy,zstd]' \
        prometheus-client opentelemetry-proto          # torch for castle.algorithms; the rest for worker.*
    cd <repository> && OMP_NUM_THREADS=1 nice -n 19 /tmp/ttpm-venv/bin/python -m worker.benchmarks.incidents_ttpm \
        --data ../shared/data/alarms/25V_474N_Microwave --out bench/results/incidents_ttpm.json

What TTPM's API does that a caller must know:
- `TTPM(topology_matrix, ...)` takes a square numpy array (it builds `networkx.Graph(matrix)`, so the
  nodes are the row indices and the `node` column must hold those indices); events on nodes outside the
  topology are dropped.
- Its defaults are delta=0.1, epsilon=1, max_hop=0, penalty='BIC', max_iter=20. max_hop=0 means each
  node's own events only: the topology is then not used at all (its docstring says 6; the code says 0).
- `causal_matrix` is a `castle.common.Tensor` (an ndarray with pandas-like `.index` and `.columns`, no
  `.values`) labelled by the *event types present* in the data (sorted by their
  original values, then renamed with `str`: `'0'`, `'1'`, ...), not by 0..n-1: a type absent from the
  training alarms shifts every later position. Row = cause, column = effect, ones on the diagonal.
  `learn_ttpm` maps the names back to integer type ids and drops the diagonal.
- It logs every hill-climbing iteration at INFO (`[iter k]: likelihood_score = ...`). Each iteration
  fits all n^2 one-edge changes (add, remove or reverse) of the graph it started from and keeps the best
  one, so it changes at most one edge: `max_iter` (default 20) caps the learned graph at max_iter edges.
  On this set (148 expert edges) the default stops long before the likelihood does: `--trace` records the
  graph after every iteration (the result max_iter=k would give), so one long run shows the whole curve.
"""

from __future__ import annotations

import argparse
import datetime as dt
import json
import os
import platform
import sys
import time
from pathlib import Path

import numpy as np

DEFAULT_DATA = Path(__file__).resolve().parents[3] / "shared" / "data" / "alarms" / "25V_474N_Microwave"
WINDOW_HOURS = 2.0
# TTPM's own defaults (castle/algorithms/ttpm/ttpm.py, gcastle 1.0.4).
TTPM_DEFAULTS = {"delta": 0.1, "epsilon": 1, "max_hop": 0, "penalty": "BIC", "max_iter": 20}
INSTALL_HINT = ("gCastle's TTPM is not installed: pip install gcastle==1.0.4 (the extra: pip install -e '.[ttpm]'; "
                "castle.algorithms also imports torch; a separate venv: see worker/benchmarks/incidents_ttpm.py)")


def _import_ttpm():
    try:
        from castle.algorithms import TTPM
    except ImportError as exc:  # gcastle itself, or torch/pandas it imports
        raise ImportError(f"{INSTALL_HINT} ({exc})") from exc
    return TTPM


def learn_ttpm(rows: np.ndarray, topology_matrix: np.ndarray, n_types: int, max_hop: int = TTPM_DEFAULTS["max_hop"],
               max_iter: int = TTPM_DEFAULTS["max_iter"], delta: float = TTPM_DEFAULTS["delta"],
               epsilon: float = TTPM_DEFAULTS["epsilon"], penalty: str = TTPM_DEFAULTS["penalty"],
               on_iteration=None) -> dict:
    """TTPM on alarm rows (alarm_id, device_id, start, ...): the learned edges [cause, effect] as type ids.

    `topology_matrix` is the square device adjacency (device ids are its indices); `n_types` bounds the
    type ids (a type absent from `rows` gets no edges: TTPM only knows the types it sees).
    `on_iteration(k, edges, seconds, cpu_seconds)`, when given, sees the graph at the start of each
    hill-climbing iteration k (= the result of max_iter=k), observed where TTPM enumerates the one-edge
    changes of its current graph; the search itself is TTPM's, unchanged.
    """
    TTPM = _import_ttpm()
    import pandas as pd

    rows = np.asarray(rows)
    table = pd.DataFrame({"event": rows[:, 0].astype(np.int64), "timestamp": rows[:, 2].astype(float),
                          "node": rows[:, 1].astype(np.int64)})
    parameters = {"delta": delta, "epsilon": epsilon, "max_hop": max_hop, "penalty": penalty, "max_iter": max_iter}
    started, cpu_started = time.perf_counter(), time.process_time()
    learner = TTPM
    if on_iteration is not None:
        seen = [0]

        class Observed(TTPM):
            def _one_step_change_iterator(self, edge_mat):
                names = [int(n) for n in self._matrix_names]
                edges = sorted([names[i], names[j]] for i, j in zip(*np.nonzero(edge_mat)) if i != j)
                on_iteration(seen[0], edges, time.perf_counter() - started, time.process_time() - cpu_started)
                seen[0] += 1
                return super()._one_step_change_iterator(edge_mat)

        learner = Observed
    model = learner(np.asarray(topology_matrix), **parameters)
    model.learn(table)
    seconds, cpu_seconds = time.perf_counter() - started, time.process_time() - cpu_started
    matrix = model.causal_matrix  # castle.common.Tensor: an ndarray with .index/.columns, the types present as str
    names = [int(n) for n in matrix.index]
    assert list(matrix.columns) == list(matrix.index), "TTPM's causal_matrix: rows and columns differ"
    values = np.asarray(matrix)
    edges = sorted([names[i], names[j]] for i, j in zip(*np.nonzero(values))
                   if i != j and names[i] < n_types and names[j] < n_types)
    return {"edges": edges, "seconds": round(seconds, 2), "cpu_seconds": round(cpu_seconds, 2),
            "parameters": parameters,
            "types_present": sorted(names), "causal_matrix_index": list(map(str, matrix.index))}


def score(edges: list[list[int]], dag: np.ndarray) -> dict:
    """Directed-edge precision, recall and F1 against the experts' DAG ([i, j] = 1: i causes j), no diagonal."""
    truth = {(int(i), int(j)) for i, j in zip(*np.nonzero(dag)) if i != j}
    found = {(int(a), int(b)) for a, b in edges if a != b}
    hits = len(found & truth)
    precision = hits / len(found) if found else 0.0
    recall = hits / len(truth) if truth else 0.0
    f1 = 2 * precision * recall / (precision + recall) if precision + recall else 0.0
    reversed_hits = len({(b, a) for a, b in found} & (truth - found))  # learned backwards only
    return {"precision": round(precision, 4), "recall": round(recall, 4), "f1": round(f1, 4),
            "learned_edges": len(found), "true_edges": len(truth), "correct_edges": hits,
            "reversed_edges": reversed_hits}


def training_rows(rows: np.ndarray, hours: float = WINDOW_HOURS) -> tuple[np.ndarray, dict]:
    """The alarms outside the busiest `hours` window (by start time), and that window."""
    from worker.benchmarks.incidents_broker import busiest

    window = busiest(rows, hours)
    lo, hi = int(window[0, 2]), int(window[-1, 2])
    keep = (rows[:, 2] < lo) | (rows[:, 2] > hi)
    return rows[keep], {"hours": hours, "first_start": lo, "last_start": hi, "alarms_in_window": int((~keep).sum())}


def chart(report: dict, path: Path) -> None:
    """Precision/recall/F1 and seconds per run; F1 and recall against max_iter for runs with a trace."""
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    runs = report["runs"]
    traced = [r for r in runs if r.get("iterations")]
    labels = [r.get("short", r["label"]) for r in runs]
    fig, axes = plt.subplots(1, 3 if traced else 2, figsize=(14 if traced else 9, 4.2),
                             gridspec_kw={"width_ratios": [2, 1.2, 1.4] if traced else [2, 1]})
    ax1, ax2 = axes[0], axes[1]
    width = 0.8 / 3
    for k, (key, color) in enumerate([("precision", "#2b6cb0"), ("recall", "#63b3ed"), ("f1", "#c05621")]):
        xs = [i + (k - 1) * width for i in range(len(runs))]
        values = [r["scores"][key] for r in runs]
        ax1.bar(xs, values, width, color=color, label=key)
        for x, v in zip(xs, values):
            ax1.text(x, v, f"{v:.2f}", ha="center", va="bottom", fontsize=6)
    ax1.set_xticks(range(len(runs)), labels, fontsize=6)
    ax1.set_ylim(0, 1)
    ax1.set_title("learned graph vs experts' DAG (directed edges)", fontsize=9)
    ax1.legend(fontsize=7)
    for k, (key, color) in enumerate([("seconds", "#718096"), ("cpu_seconds", "#cbd5e0")]):
        xs = [i + (k - 0.5) * 0.4 for i in range(len(runs))]
        values = [r.get(key) or 0 for r in runs]
        ax2.bar(xs, values, 0.4, color=color, label={"seconds": "wall", "cpu_seconds": "CPU"}[key])
        for x, v in zip(xs, values):
            ax2.text(x, v, f"{v:.0f}", ha="center", va="bottom", fontsize=6)
    ax2.set_xticks(range(len(runs)), labels, fontsize=6)
    ax2.set_title("seconds to learn (one process each)", fontsize=9)
    ax2.legend(fontsize=7)
    if traced:
        ax3 = axes[2]
        for r, color in zip(traced, ["#c05621", "#2f855a", "#6b46c1", "#2b6cb0"]):
            its = r["iterations"]
            ax3.plot([i["iteration"] for i in its], [i["f1"] for i in its], color=color,
                     label=f"F1, {r.get('short', r['label'])}".replace("\n", " "))
            ax3.plot([i["iteration"] for i in its], [i["recall"] for i in its], color=color, linestyle=":",
                     label="recall")
        ax3.axvline(TTPM_DEFAULTS["max_iter"], color="#a0aec0", linewidth=1, linestyle="--")
        ax3.set_xlabel("hill-climbing iterations (= max_iter; one edge change each)", fontsize=7)
        ax3.set_title("F1 and recall by iteration (dashed: the default 20)", fontsize=9)
        ax3.set_ylim(0, max(0.4, max(i["f1"] for r in traced for i in r["iterations"]) + 0.05))
        ax3.legend(fontsize=6)
    fig.suptitle(f"gCastle TTPM on {report['data']} training alarms ({report['machine']})", fontsize=9)
    fig.tight_layout()
    fig.savefig(path, dpi=90)
    plt.close(fig)


def compact(trace_lines: list[dict]) -> list[dict]:
    """A trace's lines without their edge lists: iteration, seconds, CPU seconds and scores."""
    return [{"iteration": t["iteration"], "seconds": t["seconds"], "cpu_seconds": t["cpu_seconds"],
             **{k: t["scores"][k] for k in ("precision", "recall", "f1", "learned_edges", "correct_edges")}}
            for t in trace_lines]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m worker.benchmarks.incidents_ttpm",
                                     description=__doc__.split("\n")[0])
    parser.add_argument("--data", type=Path, default=DEFAULT_DATA, help="folder with Alarm.csv, Topology.npy, DAG.npy")
    parser.add_argument("--out", type=Path, default=None, help="write results JSON here (and a .png beside it)")
    parser.add_argument("--max-hop", type=int, default=TTPM_DEFAULTS["max_hop"], help="TTPM max_hop (its default: 0)")
    parser.add_argument("--max-iter", type=int, default=TTPM_DEFAULTS["max_iter"],
                        help="TTPM max_iter (its default: 20; one edge change per iteration)")
    parser.add_argument("--days", type=float, default=0.0,
                        help="learn from only the first DAYS of the training alarms (a trial; 0: all)")
    parser.add_argument("--trace", type=Path, default=None,
                        help="append each hill-climbing iteration's graph and scores to this JSON Lines file")
    parser.add_argument("--label", default=None, help="this run's name in the JSON (default from its settings)")
    parser.add_argument("--append", action="store_true",
                        help="add this run to the runs already in --out instead of replacing them")
    args = parser.parse_args(argv)

    from worker.benchmarks.incidents import load_alarms

    load_before = os.getloadavg()[0]
    rows = load_alarms(args.data)
    topology_matrix = np.load(args.data / "Topology.npy")
    dag = np.load(args.data / "DAG.npy")
    train, window = training_rows(rows)
    if args.days:
        train = train[train[:, 2] < train[0, 2] + args.days * 86400]
    n_types = dag.shape[0]
    print(f"TTPM on {len(train)} training alarms of {len(rows)} (busiest {WINDOW_HOURS:g} h left out: "
          f"{window['alarms_in_window']}), max_hop={args.max_hop}, max_iter={args.max_iter}",
          file=sys.stderr, flush=True)
    on_iteration = None
    if args.trace:
        trace = args.trace.open("a")

        def on_iteration(k, edges, seconds, cpu_seconds):
            trace.write(json.dumps({"iteration": k, "seconds": round(seconds, 2), "cpu_seconds": round(cpu_seconds, 2),
                                    "scores": score(edges, dag), "edges": edges}) + "\n")
            trace.flush()
    learned = learn_ttpm(train, topology_matrix, n_types, max_hop=args.max_hop, max_iter=args.max_iter,
                         on_iteration=on_iteration)
    scores = score(learned["edges"], dag)
    command = "python -m worker.benchmarks.incidents_ttpm " + " ".join(argv if argv is not None else sys.argv[1:])
    import castle
    run = {
        "label": args.label or (f"{args.days:g} day(s), " if args.days else "all training, ")
        + f"max_hop={args.max_hop}, max_iter={args.max_iter}",
        "command": command.strip(),
        "date": dt.datetime.now(dt.timezone.utc).strftime("%Y-%m-%d %H:%M UTC"),
        "load_average_before": round(load_before, 2),
        "training_alarms": int(len(train)),
        "training_span_hours": round(float(train[-1, 2] - train[0, 2]) / 3600, 2),
        "parameters": learned["parameters"],
        "ttpm_defaults": learned["parameters"] == TTPM_DEFAULTS,
        "seconds": learned["seconds"],
        "cpu_seconds": learned["cpu_seconds"],
        "threads": {k: os.environ.get(k) for k in ("OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS")},
        "scores": scores,
        "edges": learned["edges"],
        "types_present": learned["types_present"],
        "causal_matrix_index": learned["causal_matrix_index"],
    }
    if args.trace:
        trace.close()
        lines = [json.loads(line) for line in args.trace.read_text().splitlines()]
        run["iterations"] = compact(lines) + [{"iteration": len(lines), "seconds": run["seconds"],
                                               "cpu_seconds": run["cpu_seconds"],
                                               **{k: scores[k] for k in ("precision", "recall", "f1", "learned_edges",
                                                                         "correct_edges")}}]
    print(json.dumps({k: run[k] for k in ("label", "seconds", "cpu_seconds", "scores")}), flush=True)
    if args.out is None:
        return 0
    report = {
        "what": "gCastle TTPM (gcastle " + castle.__version__ + ") learning the alarm cause graph from the training "
                "alarms (all alarms outside the busiest 2 h), scored against the experts' DAG.npy (directed edges, "
                "no diagonal); the reference for telesum bench incidents --learn (issue 38)",
        "machine": f"{platform.machine()}, {os.cpu_count()} cores (shared, run under nice -n 19), "
                   f"Python {platform.python_version()}",
        "data": args.data.name, "alarms": int(len(rows)), "types": n_types, "window": window,
        "runs": [],
    }
    if args.append and args.out.exists():
        report["runs"] = json.loads(args.out.read_text())["runs"]
    report["runs"] = [r for r in report["runs"] if r["label"] != run["label"]] + [run]
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(report, indent=1) + "\n")
    chart(report, args.out.with_suffix(".png"))
    return 0


if __name__ == "__main__":
    sys.exit(main())
