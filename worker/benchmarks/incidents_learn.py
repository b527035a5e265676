"""`telesum bench incidents --learn`: the cause graph learned from the alarm history, side by side with
the experts' graph, gCastle's TTPM and the baselines.

On the data set (shared/data/alarms/README.md): the busiest 2 h are the replayed window
(`incidents_broker.busiest`); every alarm outside it is the history learned from, with the same learner
the worker runs live and `telesum incidents learn` runs offline (`worker/incidents/learn.py`). Then:

- the learned graph against the experts' `DAG.npy`: precision, recall and F1 of directed edges, beside
  TTPM's (its committed result, `bench/results/incidents_ttpm.json`, made by
  `worker/benchmarks/incidents_ttpm.py`, or run now with `--ttpm-python` naming a Python that has
  gcastle: it lives in a virtual environment of its own);
- the window replayed through the room with topology and, in turn: the experts' rules (the reference),
  the learned graph only (a file, as `TELESUM_INCIDENT_LEARNED_RULES`, no live learning), the learned
  graph and live learning (the worker's way), live learning from nothing, TTPM's graph as rules, the
  earliest alarm; figures as `telesum bench incidents --offline` gives them (root-cause precision is
  judged by the experts' graph);
- live learning over the whole six days in event time, from nothing: root-cause precision per day;
- the same without topology (the same element as the only neighbourhood).
"""

from __future__ import annotations

import datetime as dt
import json
import os
import platform
import subprocess
import tempfile
import time
from pathlib import Path

import numpy as np

from worker.benchmarks.incidents_broker import busiest
from worker.incidents.config import RoomConfig
from worker.incidents.convert import element_name, rule_pairs, topology_pairs, type_name
from worker.incidents.graph import CauseRules, Topology
from worker.incidents.learn import CauseLearner

WINDOW_HOURS = 2.0
TTPM_RESULT = Path(__file__).resolve().parents[2] / "bench" / "results" / "incidents_ttpm.json"
DAY_S = 86400.0


def split(rows: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """(the busiest window's rows, every other row): what is replayed and what is learned from."""
    window = busiest(rows, WINDOW_HOURS)
    first, last = window[0, 2], window[-1, 2]
    return window, rows[(rows[:, 2] < first) | (rows[:, 2] > last)]


def learn(rows: np.ndarray, topology: Topology | None) -> tuple[CauseLearner, float]:
    learner = CauseLearner(topology)
    started = time.perf_counter()
    for a, d, t in rows[:, :3].tolist():
        learner.observe(element_name(d), type_name(a), float(t))
    learner.flush()
    return learner, time.perf_counter() - started


def edge_scores(edges: set[tuple[str, str]], dag: np.ndarray) -> dict:
    """Directed edges against the experts' graph (the diagonal excluded)."""
    truth = set(rule_pairs(dag))
    hits = len(edges & truth)
    precision = hits / len(edges) if edges else 0.0
    recall = hits / len(truth) if truth else 0.0
    f1 = 2 * precision * recall / (precision + recall) if hits else 0.0
    return {"edges": len(edges), "true_edges": len(truth), "correct": hits, "precision": round(precision, 4),
            "recall": round(recall, 4), "f1": round(f1, 4)}


def ttpm_reference(args, dag: np.ndarray) -> dict | None:
    """TTPM's graph and figures on the same training alarms: run now with `--ttpm-python` (a Python
    with gcastle, in its own process: `incidents_ttpm.py`), else its committed result, full training
    set at TTPM's defaults preferred; None when there is neither."""
    path = TTPM_RESULT
    if getattr(args, "ttpm_python", None):
        path = Path(tempfile.mkdtemp()) / "ttpm.json"
        subprocess.run([args.ttpm_python, "-m", "worker.benchmarks.incidents_ttpm", "--data", str(args.data),
                        "--out", str(path)], check=True)
    if not path.is_file():
        return None
    saved = json.loads(path.read_text())
    runs = sorted(saved["runs"], key=lambda r: (not r.get("ttpm_defaults"), "day" in r["label"]))
    run = runs[0]
    edges = {(type_name(a), type_name(b)) for a, b in run["edges"]}
    return {"source": "run now (--ttpm-python)" if path != TTPM_RESULT else f"{TTPM_RESULT.name}: {run['label']}",
            "date": run.get("date"), "command": run.get("command"), "seconds": run.get("seconds"),
            "parameters": run.get("parameters"), "graph": edge_scores(edges, dag), "edge_list": sorted(edges)}


def per_day(result: dict, rows: np.ndarray, rules: CauseRules) -> list[dict]:
    """Root-cause precision of the multi-type incidents, by the day of their first alarm."""
    members: dict = {}
    for i, g in enumerate(result["groups"]):
        members.setdefault(g, []).append(i)
    start = rows[0, 2]
    days: dict[int, list[int]] = {}
    for g, idx in members.items():
        types = {type_name(int(rows[i, 0])) for i in idx}
        if len(types) < 2:
            continue
        day = int((rows[idx[0], 2] - start) // DAY_S)
        days.setdefault(day, []).append(int(rules.explains(result["roots"][g], types)))
    return [{"day": d + 1, "multi_type_incidents": len(v), "root_cause_precision": round(sum(v) / len(v), 4)}
            for d, v in sorted(days.items())]


def run_learn(args, figures, load_alarms, replay) -> int:
    load_before = os.getloadavg()[0]
    rows = load_alarms(args.data, args.limit)
    topology_matrix = np.load(args.data / "Topology.npy")
    dag = np.load(args.data / "DAG.npy")
    topology = Topology(topology_pairs(topology_matrix))
    expert = CauseRules(rule_pairs(dag))
    window, train = split(rows)

    learner, learn_s = learn(train, topology)
    learned = learner.rules()
    graph_edges = {(e.cause, e.effect) for e in learner.edges()}
    alone, alone_s = learn(train, None)
    ttpm = ttpm_reference(args, dag)

    def room(**config) -> dict:
        return figures(replay(RoomConfig(**config), window), window, topology, expert)

    results = {
        "experts' rules + topology": room(topology=topology, rules=expert),
        "learned graph + topology": room(topology=topology, learned_rules=learned, learn_causes=False),
        "learned graph + live learning + topology": room(topology=topology, learned_rules=learned),
        "live learning from nothing + topology": room(topology=topology),
        "earliest alarm + topology": room(topology=topology, learn_causes=False),
        "learned graph, no topology": room(learned_rules=alone.rules(), learn_causes=False),
    }
    if ttpm is not None:
        results["TTPM's graph + topology"] = room(topology=topology, rules=CauseRules(ttpm["edge_list"]),
                                                 learn_causes=False)
    live_started = time.perf_counter()
    six_days = replay(RoomConfig(topology=topology), rows)
    live = {"seconds": round(time.perf_counter() - live_started, 1), "per_day": per_day(six_days, rows, expert),
            "whole": figures(six_days, rows, topology, expert)}
    report = {
        "command": "telesum bench incidents --learn" + (" --ttpm-python " + args.ttpm_python
                                                         if getattr(args, "ttpm_python", None) else "")
                   + (f" --out {args.out}" if args.out else ""),
        "date": dt.datetime.now(dt.timezone.utc).strftime("%Y-%m-%d %H:%M UTC"),
        "machine": f"{platform.machine()}, {os.cpu_count()} cores, Python {platform.python_version()}",
        "load_average_before": round(load_before, 2),
        "data": args.data.name, "alarms": len(rows),
        "window": {"hours": WINDOW_HOURS, "alarms": len(window), "first": int(window[0, 2]), "last": int(window[-1, 2])},
        "history_alarms": len(train),
        "learned": {"seconds": round(learn_s, 2), "graph": edge_scores(graph_edges, dag),
                    "repeats_not_counted": learner.repeats,
                    "parameters": {"lag_s": learner.lag_s, "chance_shift_s": learner.shift_s, "repeat_s": learner.repeat_s,
                                   "min_cooccurrences": learner.min_cooccurrences, "min_lift": learner.min_lift,
                                   "min_z": learner.min_z},
                    "edges": [e.as_dict() for e in learner.edges()]},
        "learned_without_topology": {"seconds": round(alone_s, 2),
                                     "graph": edge_scores({(e.cause, e.effect) for e in alone.edges()}, dag)},
        "ttpm": {k: v for k, v in ttpm.items() if k != "edge_list"} if ttpm is not None else
                "no committed result and no --ttpm-python (bench/results/incidents_ttpm.json)",
        "replayed_window": results,
        "live_learning_six_days": live,
    }
    text = json.dumps(report, indent=2) + "\n"
    if args.out:
        args.out.parent.mkdir(parents=True, exist_ok=True)
        args.out.write_text(text)
        chart(report, args.out.with_suffix(".png"))
    print(text, end="")
    return 0


SHORT = {"experts' rules + topology": "experts' rules", "learned graph + topology": "learned",
         "learned graph + live learning + topology": "learned + live", "live learning from nothing + topology":
         "live from nothing", "earliest alarm + topology": "earliest alarm", "learned graph, no topology":
         "learned, no topology", "TTPM's graph + topology": "TTPM's graph"}


def chart(report: dict, path: Path) -> None:
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(1, 3, figsize=(15, 4.6))
    names = list(report["replayed_window"])
    values = [report["replayed_window"][n]["root_cause_precision"] or 0 for n in names]
    ax = axes[0]
    ax.bar(range(len(names)), values, color="#2b6cb0")
    ax.axhline(0.9, color="#c53030", linestyle="--", linewidth=1, label="goal 0.9")
    ax.set_xticks(range(len(names)), [SHORT.get(n, n) for n in names], fontsize=7, rotation=30, ha="right")
    ax.set_title(f"root-cause precision, busiest {WINDOW_HOURS:g} h replayed")
    for i, v in enumerate(values):
        ax.text(i, v, f"{v:.2f}", ha="center", va="bottom", fontsize=7)
    ax.legend(fontsize=7)
    ax = axes[1]
    graphs = {"learned": report["learned"]["graph"], "learned, no topology": report["learned_without_topology"]["graph"]}
    if isinstance(report["ttpm"], dict):
        graphs["TTPM"] = report["ttpm"]["graph"]
    width = 0.8 / len(graphs)
    for k, (name, g) in enumerate(graphs.items()):
        ax.bar(np.arange(3) + k * width, [g["precision"], g["recall"], g["f1"]], width, label=name)
    ax.set_xticks(np.arange(3) + width * (len(graphs) - 1) / 2, ["precision", "recall", "F1"])
    ax.set_title("learned graph vs the experts' (directed edges)")
    ax.legend(fontsize=7)
    ax = axes[2]
    days = report["live_learning_six_days"]["per_day"]
    ax.plot([d["day"] for d in days], [d["root_cause_precision"] for d in days], marker="o")
    ax.axhline(0.9, color="#c53030", linestyle="--", linewidth=1)
    ax.set_ylim(0, 1.05)
    ax.set_xlabel("day")
    ax.set_title("live learning from nothing: root-cause precision per day")
    fig.suptitle(f"learning the cause graph on {report['data']} (telesum bench incidents --learn)")
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
