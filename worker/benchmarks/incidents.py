"""`telesum bench incidents --offline`: a real alarm data set replayed through the incidents room,
side by side with two baselines.

The data set (`Alarm.csv`, `Topology.npy`, `DAG.npy`; shared/data/alarms/README.md) is replayed in
event-time order (ties in file order), devices named `dev-<id>`, types `A<id>`, the room's clock
ticking as the worker's poll would (`advance` at every time the room has work due). Figures per
grouping: incidents, alarms per incident, coherence (incidents whose elements form a connected
subgraph of the topology), root-cause precision (incidents of two or more types whose root type is a
DAG ancestor of every other type), the largest incident and whether one root explains it, the time
from an incident's first alarm to its `open` event, and alarms/s. Baselines: per element with a
300 s gap (Alertmanager's `group_by: [element]`), and same-or-adjacent elements within 60 s joined
transitively (root: the earliest alarm, as for the room without rules). The room's parameters are
its defaults (chosen by principle, docs/incidents.md), not fitted to this data set.
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

import msgspec
import numpy as np

from worker.benchmarks.incidents_broker import ves_bytes
from worker.incidents.alarms import Alarm, alarm_from_record
from worker.incidents.config import RoomConfig
from worker.incidents.convert import element_name, rule_pairs, topology_pairs, type_name
from worker.incidents.graph import CauseRules, Topology
from worker.incidents.room import IncidentRoom
from worker.incidents.snapshot import snapshot
from worker.messages import TelemetryRecord

DEFAULT_DATA = Path(__file__).resolve().parents[3] / "shared" / "data" / "alarms" / "25V_474N_Microwave"
BIG_INCIDENT = 500
SNAPSHOT_EVERY = 5000
# One setting changed at a time from the defaults (not a search: the defaults stay as chosen).
SWEEP = [("idle_s", 300.0), ("idle_s", 900.0), ("idle_s", 14400.0), ("window_s", 60.0), ("window_s", 900.0),
         ("max_hops", 1), ("max_hops", 3), ("link_hops", 2)]
SWEEP_FIGURES = ("incidents", "alarms_per_incident", "coherence", "root_cause_precision", "largest_incident",
                 "incidents_over_500_unexplained", "alarms_per_s")


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--offline", action="store_true", help="replay through the room in-process")
    parser.add_argument("--learn", action="store_true",
                        help="learn the cause graph from the history outside the busiest 2 h, replay those 2 h with "
                             "it, side by side with TTPM and the baselines (incidents_learn.py)")
    parser.add_argument("--ttpm-python", default=None, metavar="PYTHON",
                        help="--learn: run gCastle's TTPM now with this Python (one with gcastle; slow) instead of "
                             "quoting its committed result (worker/benchmarks/incidents_ttpm.py)")
    parser.add_argument("--broker", metavar="HOST:PORT", default=None,
                        help="replay through this broker and a telesum worker --incident-only (incidents_broker.py)")
    parser.add_argument("--hours", type=float, default=6.0, help="--broker: the busiest hours replayed paced")
    parser.add_argument("--speedup", type=float, default=600.0, help="--broker: the paced replay's speed-up")
    parser.add_argument("--kills", type=int, default=2, help="--broker: SIGKILLs of the worker in a third run")
    parser.add_argument("--kill-every", type=float, default=8.0, help="--broker: seconds between those SIGKILLs")
    parser.add_argument("--state-topic", action="store_true",
                        help="--broker: the worker keeps its rooms on a state topic (TELESUM_INCIDENT_STATE_TOPIC)")
    parser.add_argument("--data", type=Path, default=DEFAULT_DATA, help="folder with Alarm.csv, Topology.npy, DAG.npy")
    parser.add_argument("--out", type=Path, default=None, help="write results JSON here (and a .png beside it)")
    parser.add_argument("--limit", type=int, default=0, help="replay only the first N alarms (0: all)")
    parser.add_argument("--sweep", action="store_true",
                        help="also one window or bound changed at a time (topology + rules): how the figures move")


def load_alarms(folder: Path, limit: int = 0) -> np.ndarray:
    """Alarm.csv as int64 rows (alarm_id, device_id, start, end), sorted by start time (stable)."""
    rows = np.loadtxt(folder / "Alarm.csv", delimiter=",", skiprows=1, dtype=np.int64, ndmin=2)
    rows = rows[np.argsort(rows[:, 2], kind="stable")]
    return rows[:limit] if limit else rows


def replay(config: RoomConfig, rows: np.ndarray) -> dict:
    """Every alarm through one room; which incident each input ended in, the roots, open delays, rate."""
    alarms = [Alarm(element_name(int(d)), type_name(int(a)), float(t), input=i)
              for i, (a, d, t) in enumerate(rows[:, :3].tolist())]
    room = IncidentRoom(config)
    owner: dict[int, str] = {}
    merged: dict[str, str] = {}
    root: dict[str, str] = {}
    first: dict[str, float] = {}
    open_delay: list[float] = []
    events = 0

    def take(batch) -> None:
        nonlocal events
        for event in batch:
            events += 1
            for i in event.inputs:
                owner[i] = event.incident_id
            root[event.incident_id] = event.root_cause.alarm_type
            if event.event == "open":
                first[event.incident_id] = alarms[event.inputs[0]].time
                open_delay.append(dt.datetime.fromisoformat(event.time).timestamp() - alarms[event.inputs[0]].time)
            if event.merged_into:
                merged[event.incident_id] = event.merged_into

    start = time.perf_counter()
    for alarm in alarms:
        while (due := room.next_due()) is not None and due < alarm.time:
            take(room.advance(due))
        take(room.add(alarm))
    take(room.close())
    seconds = time.perf_counter() - start

    def final(incident_id: str) -> str:
        while incident_id in merged:
            incident_id = merged[incident_id]
        return incident_id

    groups = [final(owner[i]) for i in range(len(alarms))]
    return {"groups": groups, "roots": {g: root[g] for g in set(groups)}, "seconds": seconds,
            "events": events, "open_delay_s": open_delay, "merged": len(merged)}


def ves_path(config: RoomConfig, rows: np.ndarray, snapshot_every: int) -> dict:
    """What the worker will do per alarm, minus Kafka: decode a bare VES fault event (JSON bytes, as
    ONAP's collector publishes it, written as the broker bench sends it), read its alarm, place it,
    encode the events as JSON; snapshots of the room every `snapshot_every` alarms (their size and
    cost: one message on a compacted topic)."""
    bodies = [ves_bytes(i, a, d, t) for i, (a, d, t) in enumerate(rows[:, :3].tolist())]
    room = IncidentRoom(config)
    encoder = msgspec.json.Encoder()
    sizes, costs, out_bytes = [], [], 0
    start = time.perf_counter()
    for offset, data in enumerate(bodies):
        record = TelemetryRecord(id=str(offset), kind="ves", body=msgspec.json.decode(data))
        alarm = alarm_from_record(record, None, input={"topic": "alarms", "partition": 0, "offset": offset})
        events = []
        while (due := room.next_due()) is not None and due < alarm.time:
            events += room.advance(due)
        events += room.add(alarm)
        for event in events:
            out_bytes += len(encoder.encode(event))
        if snapshot_every and offset % snapshot_every == snapshot_every - 1:
            began = time.perf_counter()
            sizes.append(len(snapshot(room)))
            costs.append(time.perf_counter() - began)
    for event in room.close():
        out_bytes += len(encoder.encode(event))
    seconds = time.perf_counter() - start
    return {"alarms_per_s": round(len(rows) / seconds, 1), "seconds": round(seconds, 3),
            "event_bytes_per_alarm": round(out_bytes / len(rows), 1),
            "snapshot_every": snapshot_every, "snapshot_bytes_max": max(sizes, default=0),
            "snapshot_bytes_median": int(np.median(sizes)) if sizes else 0,
            "snapshot_ms_max": round(1000 * max(costs, default=0.0), 2),
            "note": "rate includes the snapshots; the VES JSON decode stands for the input layer"}


def baseline_per_element(rows: np.ndarray, gap_s: float) -> dict:
    """Alertmanager-style: per element, a new group after `gap_s` of silence; root = earliest alarm."""
    last: dict[int, tuple[float, int]] = {}
    groups, roots, n = [], {}, 0
    for a, d, t in rows[:, :3].tolist():
        held = last.get(d)
        if held is None or t - held[0] > gap_s:
            held = (t, n)
            roots[n] = type_name(a)
            n += 1
        last[d] = (t, held[1])
        groups.append(held[1])
    return {"groups": groups, "roots": roots}


def baseline_adjacent(rows: np.ndarray, topology: np.ndarray, window_s: float) -> dict:
    """Same or adjacent elements within `window_s`, joined transitively (union-find); root = earliest."""
    neighbours = [np.nonzero(topology[i])[0].tolist() for i in range(topology.shape[0])]
    parent = list(range(len(rows)))

    def find(i: int) -> int:
        while parent[i] != i:
            parent[i] = parent[parent[i]]
            i = parent[i]
        return i

    last: dict[int, tuple[float, int]] = {}
    for i, (_, d, t) in enumerate(rows[:, :3].tolist()):
        for e in [d, *neighbours[d]]:
            held = last.get(e)
            if held is not None and t - held[0] <= window_s:
                a, b = find(i), find(held[1])
                if a != b:
                    parent[max(a, b)] = min(a, b)
        last[d] = (t, i)
    groups = [find(i) for i in range(len(rows))]
    roots = {}
    for i, g in enumerate(groups):  # rows are in time order: the first seen is the earliest
        roots.setdefault(g, type_name(int(rows[i, 0])))
    return {"groups": groups, "roots": roots}


def figures(result: dict, rows: np.ndarray, topology: Topology, rules: CauseRules) -> dict:
    """The figures of one grouping (its `groups`: one incident id per alarm, `roots`: id -> root type)."""
    members: dict = {}
    for i, g in enumerate(result["groups"]):
        members.setdefault(g, []).append(i)
    sizes = np.array([len(m) for m in members.values()])
    connected = multi = precise = 0
    big = []
    for g, idx in members.items():
        elements = {element_name(int(rows[i, 1])) for i in idx}
        types = {type_name(int(rows[i, 0])) for i in idx}
        connected += topology.is_connected(elements)
        explained = rules.explains(result["roots"][g], types)
        if len(types) >= 2:
            multi += 1
            precise += explained
        if len(idx) > BIG_INCIDENT:
            big.append({"alarms": len(idx), "elements": len(elements), "types": len(types),
                        "root": result["roots"][g], "root_explains_all": bool(explained)})
    out = {
        "incidents": len(members),
        "alarms_per_incident": round(len(rows) / len(members), 2),
        "median_alarms": float(np.median(sizes)),
        "single_alarm_incidents": int((sizes == 1).sum()),
        "coherence": round(connected / len(members), 4),
        "multi_type_incidents": multi,
        "root_cause_precision": round(precise / multi, 4) if multi else None,
        "largest_incident": int(sizes.max()),
        "incidents_over_500": big,
        "incidents_over_500_unexplained": sum(1 for b in big if not b["root_explains_all"]),
    }
    if "seconds" in result:
        delays = np.array(result["open_delay_s"])
        out.update({
            "alarms_per_s": round(len(rows) / result["seconds"], 1),
            "seconds": round(result["seconds"], 3),
            "events": result["events"],
            "merges": result["merged"],
            "open_delay_s": {"p50": round(float(np.percentile(delays, 50)), 3),
                             "p99": round(float(np.percentile(delays, 99)), 3),
                             "max": round(float(delays.max()), 3)},
        })
    return out


SHORT = {"room: topology + rules": "room: topo + rules", "room: topology only": "room: topo only",
         "room: topology only, earliest root": "room: topo, earliest", "per element, 300 s gap": "element, 300 s",
         "adjacent within 60 s": "adjacent, 60 s"}


def chart(results: dict, path: Path) -> None:
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    names = list(results)
    panels = [("alarms_per_incident", "alarms per incident", 15), ("coherence", "coherence", 0.95),
              ("root_cause_precision", "root-cause precision", 0.9), ("largest_incident", "largest incident", 500),
              ("alarms_per_s", "alarms/s (rooms)", 2000)]
    fig, axes = plt.subplots(1, len(panels), figsize=(3.8 * len(panels), 4.4))
    for ax, (key, title, goal) in zip(axes, panels):
        values = [results[n].get(key) or 0 for n in names]
        ax.bar(range(len(names)), values, color=["#2b6cb0", "#63b3ed", "#a0aec0", "#cbd5e0", "#e2e8f0"][:len(names)])
        ax.axhline(goal, color="#c53030", linestyle="--", linewidth=1, label=f"goal / bound {goal}")
        ax.set_xticks(range(len(names)), [SHORT.get(n, n) for n in names], fontsize=7, rotation=30, ha="right")
        ax.set_title(title)
        for i, v in enumerate(values):
            ax.text(i, v, f"{v:g}", ha="center", va="bottom", fontsize=7)
        ax.legend(fontsize=7)
    fig.suptitle("incidents on 25V_474N_Microwave (telesum bench incidents --offline)")
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


def run(args: argparse.Namespace) -> int:
    if args.broker:
        from worker.benchmarks.incidents_broker_report import run_broker

        return run_broker(args, figures, load_alarms)
    if args.learn:
        from worker.benchmarks.incidents_learn import run_learn

        return run_learn(args, figures, load_alarms, replay)
    if not args.offline:
        print("choose --offline (in-process), --learn (a learned cause graph) or --broker HOST:PORT (through a real "
              "broker and worker)", file=sys.stderr)
        return 2
    load_before = os.getloadavg()[0]
    rows = load_alarms(args.data, args.limit)
    topology_matrix = np.load(args.data / "Topology.npy")
    topology = Topology(topology_pairs(topology_matrix))
    rules = CauseRules(rule_pairs(np.load(args.data / "DAG.npy")))
    results = {
        "room: topology + rules": figures(replay(RoomConfig(topology=topology, rules=rules), rows),
                                          rows, topology, rules),
        "room: topology only": figures(replay(RoomConfig(topology=topology), rows), rows, topology, rules),
        "room: topology only, earliest root": figures(replay(RoomConfig(topology=topology, learn_causes=False), rows),
                                                      rows, topology, rules),
        "per element, 300 s gap": figures(baseline_per_element(rows, 300.0), rows, topology, rules),
        "adjacent within 60 s": figures(baseline_adjacent(rows, topology_matrix, 60.0), rows, topology, rules),
    }
    defaults = RoomConfig()
    sweep = {}
    if args.sweep:
        for name, value in SWEEP:
            config = RoomConfig(topology=topology, rules=rules, **{name: value})
            found = figures(replay(config, rows), rows, topology, rules)
            sweep[f"{name}={value:g}"] = {k: found[k] for k in SWEEP_FIGURES}
    report = {
        "command": "telesum bench incidents --offline" + (f" --limit {args.limit}" if args.limit else "")
                   + (" --sweep" if args.sweep else "") + (f" --out {args.out}" if args.out else ""),
        "date": dt.datetime.now(dt.timezone.utc).strftime("%Y-%m-%d %H:%M UTC"),
        "machine": f"{platform.machine()}, {os.cpu_count()} cores, Python {platform.python_version()}",
        "load_average_before": round(load_before, 2),
        "data": str(args.data.name), "alarms": len(rows), "elements": len(topology),
        "links": topology.num_links, "rules": len(rules),
        "room_defaults": {k: getattr(defaults, k) for k in ("late_s", "window_s", "link_hops", "max_hops",
                                                            "idle_s", "update_interval_s")},
        "results": results,
    }
    report["ves_path_topology_rules"] = ves_path(RoomConfig(topology=topology, rules=rules), rows, SNAPSHOT_EVERY)
    report["ves_path_topology_learning"] = ves_path(RoomConfig(topology=topology), rows, SNAPSHOT_EVERY)
    if sweep:
        report["sweep_topology_rules"] = sweep
    text = json.dumps(report, indent=2) + "\n"
    if args.out:
        args.out.parent.mkdir(parents=True, exist_ok=True)
        args.out.write_text(text)
        chart(results, args.out.with_suffix(".png"))
    print(text, end="")
    return 0
