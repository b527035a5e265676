"""`telesum bench incidents --broker`'s report: the runs of `incidents_broker.py` (paced, backlog, SIGKILLs), their figures
(`incidents.figures` for the grouping), the JSON and the chart."""

from __future__ import annotations

import os
import tempfile
from pathlib import Path

import numpy as np

from worker.benchmarks.incidents_broker import (COMMIT_INTERVAL_S, PARTITIONS, SESSION_TIMEOUT_MS, busiest,
                                                component_keys, groups_of, open_delays, phase, temp_files)
from worker.incidents.graph import Topology


def run_broker(args, figures, load_alarms) -> int:
    """`figures` and `load_alarms`: incidents.py's (passed in: that module is the command and imports this one)."""
    import datetime as dt
    import json
    import platform

    from worker.incidents.convert import rule_pairs, topology_pairs
    from worker.incidents.graph import CauseRules

    load_before = os.getloadavg()[0]
    rows = load_alarms(args.data, args.limit)
    topology = Topology(topology_pairs(np.load(args.data / "Topology.npy")))
    rules = CauseRules(rule_pairs(np.load(args.data / "DAG.npy")))
    files, keys = temp_files(args.data), component_keys(topology)
    logs = Path(tempfile.mkdtemp(prefix="incidents-bench-logs-"))
    hot = busiest(rows, args.hours)
    paced = phase(args.broker, hot, files, keys, args.speedup, logs / "paced.log", wait_s=120,
                  state=args.state_topic)
    delays = np.array(open_delays(paced["events"], paced["sent_at"]))
    _, paced_listed = groups_of(paced["events"], paced["where"], len(hot))
    backlog = phase(args.broker, rows, files, keys, 0.0, logs / "backlog.log", wait_s=300, state=args.state_topic)
    result, listed = groups_of(backlog["events"], backlog["where"], len(rows))
    kill_at = tuple(args.kill_every * (k + 1) for k in range(args.kills))
    killed = phase(args.broker, rows, files, keys, 0.0, logs / "sigkill.log", wait_s=400, kill_at_s=kill_at,
                   state=args.state_topic) if args.kills else None
    times = sorted(at for at, e in backlog["events"])
    firsts = sorted(at for at, e in backlog["events"] for _ in e.get("inputs", []))
    t99 = firsts[int(0.99 * len(rows)) - 1] if len(firsts) >= 0.99 * len(rows) else float("nan")
    broker_figures = figures(result, rows, topology, rules)
    report = {
        "command": f"telesum bench incidents --broker {args.broker} --hours {args.hours:g} --speedup {args.speedup:g}"
                   + f" --kills {args.kills} --kill-every {args.kill_every:g}"
                   + (" --state-topic" if args.state_topic else "")
                   + (f" --limit {args.limit}" if args.limit else "") + (f" --out {args.out}" if args.out else ""),
        "date": dt.datetime.now(dt.timezone.utc).strftime("%Y-%m-%d %H:%M UTC"),
        "machine": f"{platform.machine()}, {os.cpu_count()} cores, Python {platform.python_version()}; broker, "
                   "worker and producer on the same machine",
        "load_average_before": round(load_before, 2),
        "worker": f"telesum worker --incident-only, exactly-once, commit interval {COMMIT_INTERVAL_S} s, "
                  f"session timeout {int(SESSION_TIMEOUT_MS) / 1000:g} s, "
                  + ("open incidents on a compacted state topic, " if args.state_topic else "open incidents recomputed, ")
                  + f"{PARTITIONS} partitions keyed by topology component, room defaults",
        "paced": {
            "alarms": len(hot), "hours": args.hours, "speedup": args.speedup,
            "alarms_per_s_offered": round(len(hot) / (args.hours * 3600 / args.speedup), 1),
            "incidents_opened": int(len(delays)),
            "open_after_first_alarm_s": {"p50": round(float(np.percentile(delays, 50)), 3),
                                         "p99": round(float(np.percentile(delays, 99)), 3),
                                         "max": round(float(delays.max()), 3)} if len(delays) else None,
            "inputs_in_no_incident": len(hot) - len(paced_listed),
            "inputs_in_two": sum(1 for n in paced_listed.values() if n > 1),
            "worker_exit_code": paced["exit_code"]},
        "backlog": {
            "alarms": len(rows),
            "alarms_per_s_held": round(0.99 * len(rows) / (t99 - times[0]), 1) if times else None,
            "held_means": "99 % of the inputs listed over the time from the first event read to that point",
            "seconds_worker_start_to_all_listed": round(firsts[-1] - backlog["started"], 2) if firsts else None,
            "inputs_in_no_incident": len(rows) - len(listed),
            "inputs_in_two": sum(1 for n in listed.values() if n > 1),
            "events": len(backlog["events"]),
            "uncommitted_at_end_per_partition": backlog["uncommitted"],
            "uncommitted_means": "inputs above the committed offset after the drain: the open incidents' range a "
                                 "restart recomputes (the committed offset never passes an open incident's alarm)",
            "worker_exit_code": backlog["exit_code"],
            "figures": broker_figures},
        "logs": str(logs),
    }
    if killed is not None:
        _, killed_listed = groups_of(killed["events"], killed["where"], len(rows))
        killed_firsts = sorted(at for at, e in killed["events"] for _ in e.get("inputs", []))
        report["sigkill"] = {
            "alarms": len(rows), "sigkills_at_s_after_start": list(kill_at),
            "inputs_in_no_incident": len(rows) - len(killed_listed),
            "inputs_in_two": sum(1 for n in killed_listed.values() if n > 1),
            "seconds_first_start_to_all_listed": round(killed_firsts[-1] - killed["started"], 2)
            if killed_firsts else None,
            "worker_exit_code": killed["exit_code"]}
    text = json.dumps(report, indent=2) + "\n"
    if args.out:
        args.out.parent.mkdir(parents=True, exist_ok=True)
        args.out.write_text(text)
        chart(report, delays, args.out.with_suffix(".png"))
    print(text, end="")
    return 0


def chart(report: dict, delays: np.ndarray, path: Path) -> None:
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, (left, right) = plt.subplots(1, 2, figsize=(10, 4))
    if len(delays):
        left.hist(delays, bins=30, color="#2b6cb0")
    left.axvline(2.0, color="#c53030", linestyle="--", linewidth=1, label="goal 2 s")
    left.set_title(f"first alarm sent -> open read ({report['paced']['alarms']} alarms, "
                   f"{report['paced']['speedup']:g}x)", fontsize=9)
    left.set_xlabel("seconds")
    left.legend(fontsize=7)
    b = report["backlog"]
    names = ["alarms/s held", "alarms per incident", "in no incident", "in two"]
    values = [b["alarms_per_s_held"] or 0, b["figures"]["alarms_per_incident"], b["inputs_in_no_incident"],
              b["inputs_in_two"]]
    right.bar(range(len(names)), values, color="#63b3ed")
    right.set_xticks(range(len(names)), names, fontsize=8)
    for i, v in enumerate(values):
        right.text(i, v, f"{v:g}", ha="center", va="bottom", fontsize=8)
    right.set_yscale("symlog")
    right.set_title(f"whole set through the broker ({b['alarms']} alarms, exactly-once)", fontsize=9)
    fig.suptitle("telesum bench incidents --broker", fontsize=10)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
