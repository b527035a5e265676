"""Incidents to a real Alertmanager (issue 41): how soon an incident's alert arrives after its `open`, and the
incident loop's alarms/s with Alertmanager up, down (connection refused) and hanging (accepts, never
answers), side by side, through a real broker and a real `telesum worker --incident-only`.

    .venv/bin/python bench/alertmanager.py --broker 127.0.0.1:19492 --out bench/results/alertmanager.json

The alarm data set as `telesum bench incidents --broker` replays it (`worker/benchmarks/incidents_broker.py`:
bare VES fault events keyed by topology component into 4 partitions, exactly-once, topology and rules):

- paced: the busiest `--hours` at `--speedup`, the worker posting to the real Alertmanager (webhook
  receiver recording, group_wait 0 s) and to a recording stand-in (an HA pair): per incident, the time
  from its `open` read by a read_committed consumer to its alert's arrival at the stand-in and to the real
  Alertmanager's notification, and from its first alarm's send to the alert's arrival; at the end, the
  real Alertmanager's active alerts against the incidents still open;
- backlog: every alarm produced first, then the worker started, once per Alertmanager state: alarms/s
  held as in `telesum bench incidents --broker` (99 % of the inputs listed over the time from the first
  event read).
"""

from __future__ import annotations

import argparse
import datetime as dt
import json
import os
import platform
import resource
import socket
import sys
import tempfile
import threading
import time
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from tests.alerting.helpers import Alertmanager, Recorder, free_port, notifications  # noqa: E402
from worker.benchmarks.incidents import load_alarms  # noqa: E402
from worker.benchmarks.incidents_broker import (busiest, component_keys, groups_of, open_delays, phase,  # noqa: E402
                                                temp_files)
from worker.incidents.convert import topology_pairs  # noqa: E402
from worker.incidents.graph import Topology  # noqa: E402

DATA = ROOT.parent / "shared" / "data" / "alarms" / "25V_474N_Microwave"
URL_ENV = "TELESUM_ALERTMANAGER_URL"


class Blackhole:
    """Accepts connections and never answers: an Alertmanager that hangs."""

    def __init__(self) -> None:
        self.sock = socket.socket()
        self.sock.bind(("127.0.0.1", 0))
        self.sock.listen(64)
        self.url = f"http://127.0.0.1:{self.sock.getsockname()[1]}"
        self.held: list[socket.socket] = []
        threading.Thread(target=self._accept, daemon=True).start()

    def _accept(self) -> None:
        while True:
            try:
                self.held.append(self.sock.accept()[0])
            except OSError:
                return

    def close(self) -> None:
        self.sock.close()
        for s in self.held:
            s.close()


def stats(values: list[float]) -> dict | None:
    if not values:
        return None
    a = np.array(values)
    return {"n": len(a), "p50": round(float(np.percentile(a, 50)), 3), "p99": round(float(np.percentile(a, 99)), 3),
            "max": round(float(a.max()), 3)}


def first_arrivals(posts: list[dict]) -> dict[str, float]:
    """incident id -> wall time its first firing alert arrived at the stand-in."""
    out: dict[str, float] = {}
    for p in posts:
        for alert in p["body"] if isinstance(p["body"], list) else []:
            out.setdefault(alert["labels"]["incident_id"], p["wall"])
    return out


def paced_run(args, rows, files, keys, logs: Path, am: Alertmanager, receiver: Recorder, standin: Recorder) -> dict:
    os.environ[URL_ENV] = f"{am.url},{standin.url}"
    hot = busiest(rows, args.hours)
    run = phase(args.broker, hot, files, keys, args.speedup, logs / "paced.log", wait_s=120)
    time.sleep(2.0)  # the real Alertmanager's last notifications (group_interval 1 s)
    opens = {e["incident_id"]: at for at, e in run["events"] if e["event"] == "open"}
    last = {e["incident_id"]: e["event"] for _, e in run["events"]}
    resolved = {e["incident_id"]: at for at, e in run["events"] if e["event"] == "resolve"}
    merged = {e["incident_id"] for _, e in run["events"] if e.get("merged_into")}
    first_alarm = {e["incident_id"]: run["sent_at"][(e["inputs"][0]["partition"], e["inputs"][0]["offset"])]
                   for _, e in run["events"] if e["event"] == "open" and e.get("inputs")}
    arrived = first_arrivals(standin.snapshot())
    notified: dict[str, float] = {}
    for post in receiver.snapshot():
        for alert in post["body"]["alerts"] if post["path"] == "/hook" else []:
            notified.setdefault(alert["labels"]["incident_id"], post["wall"])
    active = {a["labels"]["incident_id"] for a in am.alerts(active=True)}
    still_open = {i for i, kind in last.items() if kind != "resolve"}
    _, listed = groups_of(run["events"], run["where"], len(hot))
    raw = {"open_read_to_alert_at_alertmanager_s": [arrived[i] - t for i, t in opens.items() if i in arrived],
           "open_read_to_alertmanager_notification_s": [notified[i] - t for i, t in opens.items() if i in notified],
           "first_alarm_sent_to_alert_at_alertmanager_s": [arrived[i] - t for i, t in first_alarm.items()
                                                           if i in arrived]}
    return {"_raw": raw, **{k: stats(v) for k, v in raw.items()},
        "alarms": len(hot), "hours": args.hours, "speedup": args.speedup, "incidents_opened": len(opens),
        "open_after_first_alarm_s": stats(open_delays(run["events"], run["sent_at"])),
        "incidents_without_an_alert": len(set(opens) - set(arrived)),
        "incidents_without_a_notification": len(set(opens) - set(notified)),
        "of_those_resolved_within_1s_of_open": sum(1 for i in set(opens) - set(notified)
                                                   if i in resolved and resolved[i] - opens[i] <= 1.0),
        "of_those_merged_into_another": sum(1 for i in set(opens) - set(notified) if i in merged),
        "resolved_incidents_still_firing_at_alertmanager": len(active - still_open),
        "open_incidents_not_firing_at_alertmanager": len(still_open - active),
        "inputs_in_no_incident": len(hot) - len(listed), "worker_exit_code": run["exit_code"],
        "means": "open read: a read_committed consumer reads the open event; alert at Alertmanager: the worker's "
                 "post arrives at the second Alertmanager URL (a recording stand-in; the real one gets the same "
                 "posts); notification: the real Alertmanager's webhook call (group_wait 0 s)"}


def backlog_run(args, rows, files, keys, logs: Path, name: str, url: str | None) -> dict:
    if url is None:
        os.environ.pop(URL_ENV, None)
    else:
        os.environ[URL_ENV] = url
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    run = phase(args.broker, rows, files, keys, 0.0, logs / f"backlog-{name.split(':')[0]}.log", wait_s=300)
    after = resource.getrusage(resource.RUSAGE_CHILDREN)  # the worker process, waited for by phase()
    cpu_s = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
    times = sorted(at for at, _ in run["events"])
    firsts = sorted(at for at, e in run["events"] for _ in e.get("inputs", []))
    t99 = firsts[int(0.99 * len(rows)) - 1] if len(firsts) >= 0.99 * len(rows) else float("nan")
    _, listed = groups_of(run["events"], run["where"], len(rows))
    return {"alertmanager": name, "alarms": len(rows),
            "alarms_per_s_held": round(0.99 * len(rows) / (t99 - times[0]), 1) if times else None,
            "seconds_worker_start_to_all_listed": round(firsts[-1] - run["started"], 2) if firsts else None,
            "worker_cpu_s": round(cpu_s, 2), "alarms_per_worker_cpu_s": round(len(rows) / cpu_s, 1),
            "inputs_in_no_incident": len(rows) - len(listed), "inputs_in_two": sum(1 for n in listed.values() if n > 1),
            "load_average": round(os.getloadavg()[0], 2), "worker_exit_code": run["exit_code"]}


def in_process_runs(args, rows, states, rounds: int) -> list[dict]:
    """The room's replay of the data set (as `telesum bench incidents --offline` runs it) handing every event
    to an AlertSender as the incident loop does, per Alertmanager state, order rotated: the loop's own rate
    without the broker's noise, and the sender's threads beside it."""
    from worker.alerting import AlertSender
    from worker.incidents import IncidentRoom, RoomConfig
    from worker.incidents.alarms import Alarm
    from worker.incidents.convert import element_name, rule_pairs, type_name
    from worker.incidents.graph import CauseRules
    from worker.settings.alerting import AlertingSettings

    config = RoomConfig(topology=Topology(topology_pairs(np.load(args.data / "Topology.npy"))),
                        rules=CauseRules(rule_pairs(np.load(args.data / "DAG.npy"))))
    alarms = [Alarm(element_name(int(d)), type_name(int(a)), float(t), input=i)
              for i, (a, d, t) in enumerate(rows[:, :3].tolist())]
    out = []
    for r in range(rounds):
        for name, url in states[r % len(states):] + states[:r % len(states)]:
            sender = AlertSender(AlertingSettings(alertmanager_url=url, resend_s=10)) if url else None
            if sender is not None:
                sender.start()
            room, events, syncs = IncidentRoom(config), 0, 0
            started, cpu = time.perf_counter(), time.process_time()
            for i, alarm in enumerate(alarms):
                while (due := room.next_due()) is not None and due < alarm.time:
                    batch = room.advance(due)
                    events += len(batch)
                    for event in batch if sender is not None else ():
                        sender.submit(event)
                batch = room.add(alarm)
                events += len(batch)
                for event in batch if sender is not None else ():
                    sender.submit(event)
                if sender is not None and i % 5000 == 0:  # a resync's worth of open incidents
                    sender.sync(room.open_incidents())
                    syncs += 1
            seconds, cpu = time.perf_counter() - started, time.process_time() - cpu
            queued = sender.stats().queued if sender is not None else 0
            if sender is not None:
                sender.close(1.0)
            out.append({"alertmanager": name, "alarms": len(alarms), "events": events,
                        "alarms_per_s": round(len(alarms) / seconds, 1), "process_cpu_s": round(cpu, 2),
                        "queued_at_end": queued, "load_average": round(os.getloadavg()[0], 2)})
            print(json.dumps(out[-1]), flush=True)
    return out


def chart(report: dict, path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, (left, right, cpu) = plt.subplots(1, 3, figsize=(17, 4.8))
    paced = report["paced"]
    for key, label in (("open_read_to_alert_at_alertmanager_s", "open read → alert at Alertmanager"),
                       ("open_read_to_alertmanager_notification_s", "open read → Alertmanager's notification"),
                       ("first_alarm_sent_to_alert_at_alertmanager_s", "first alarm sent → alert at Alertmanager")):
        values = np.sort(np.array(report["raw"].get(key, [])))
        if len(values):
            left.plot(values, np.arange(1, len(values) + 1) / len(values), label=f"{label} (p99 {paced[key]['p99']} s)")
    left.axvline(1.0, color="grey", linestyle=":", linewidth=1)
    left.set_xlabel("seconds")
    left.set_ylabel("share of incidents")
    left.set_title(f"paced: {paced['incidents_opened']} incidents, {paced['alarms']} alarms at {paced['speedup']:g}×")
    left.legend(fontsize=8, loc="lower right")
    runs = report["backlog"]
    states = list(dict.fromkeys(r["alertmanager"] for r in runs))
    colours = {"off": "#888", "up": "#1f8a4c", "down": "#c0392b", "hanging": "#d68910"}
    for x, state in enumerate(states):
        rates = [r["alarms_per_s_held"] or 0 for r in runs if r["alertmanager"] == state]
        median = float(np.median(rates))
        right.bar(x, median, color=colours.get(state.split()[0].rstrip(":"), "#888"), alpha=0.8)
        right.scatter([x] * len(rates), rates, color="black", s=12, zorder=3)
        right.annotate(f"{median:,.0f}", (x, median), ha="center", va="bottom", xytext=(0, 3),
                       textcoords="offset points")
    right.set_xticks(range(len(states)), [s.replace(": ", ":\n") for s in states], fontsize=8)
    for x, state in enumerate(states):
        seconds = [r["worker_cpu_s"] for r in runs if r["alertmanager"] == state and "worker_cpu_s" in r]
        if seconds:
            median = float(np.median(seconds))
            cpu.bar(x, median, color=colours.get(state.split()[0].rstrip(":"), "#888"), alpha=0.8)
            cpu.scatter([x] * len(seconds), seconds, color="black", s=12, zorder=3)
            cpu.annotate(f"{median:.1f} s", (x, median), ha="center", va="bottom", xytext=(0, 3),
                         textcoords="offset points")
    cpu.set_xticks(range(len(states)), [s.replace(": ", ":\n") for s in states], fontsize=8)
    cpu.set_ylabel("worker process CPU seconds (user + system)")
    cpu.set_title("the same runs: the worker's CPU, start to drain", fontsize=10)
    right.set_ylabel("alarms/s held (bar: median; dots: each run)")
    right.set_title(f"backlog of {runs[0]['alarms']:,} alarms, {len(runs) // len(states)} runs per state, "
                    "order rotated", fontsize=10)
    fig.suptitle(f"Incidents to Alertmanager, {report['date']} ({report['machine']})", fontsize=9)
    fig.tight_layout()
    fig.savefig(path, dpi=110)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--broker", required=True, metavar="HOST:PORT")
    parser.add_argument("--data", type=Path, default=DATA)
    parser.add_argument("--hours", type=float, default=6.0)
    parser.add_argument("--speedup", type=float, default=600.0)
    parser.add_argument("--limit", type=int, default=0, help="only the first N alarms of the backlog")
    parser.add_argument("--rounds", type=int, default=1, help="backlog runs per Alertmanager state (order rotated)")
    parser.add_argument("--out", type=Path, default=None)
    parser.add_argument("--chart", type=Path, default=None, help="only draw the chart of this JSON result")
    args = parser.parse_args()
    if args.chart:
        chart(json.loads(args.chart.read_text()), args.chart.with_suffix(".png"))
        return 0

    load_before = os.getloadavg()[0]
    rows = load_alarms(args.data, args.limit)
    files = temp_files(args.data)
    keys = component_keys(Topology(topology_pairs(np.load(args.data / "Topology.npy"))))
    logs = Path(tempfile.mkdtemp(prefix="alertmanager-bench-"))
    receiver, standin, blackhole = Recorder(), Recorder(), Blackhole()
    am = Alertmanager(logs / "alertmanager", receiver, group_wait="0s", group_interval="1s")
    am.start()
    os.environ["TELESUM_ALERTMANAGER_RESEND_S"] = "10"
    try:
        paced = paced_run(args, rows, files, keys, logs, am, receiver, standin)
        raw = paced.pop("_raw")
        print(json.dumps(paced), flush=True)
        states = [("off (no URL)", None), ("up", am.url), ("down: connection refused", f"http://127.0.0.1:{free_port()}"),
                  ("hanging: accepts, never answers", blackhole.url)]
        in_process = in_process_runs(args, rows, states, args.rounds)
        backlog = []
        for r in range(args.rounds):
            for name, url in states[r % len(states):] + states[:r % len(states)]:
                backlog.append(backlog_run(args, rows, files, keys, logs, name, url))
                print(json.dumps(backlog[-1]), flush=True)
    finally:
        am.stop()
        for server in (receiver, standin, blackhole):
            server.close()
    report = {
        "command": "python bench/alertmanager.py --broker " + args.broker
                   + (f" --hours {args.hours:g}" if args.hours != 6 else "")
                   + (f" --speedup {args.speedup:g}" if args.speedup != 600 else "")
                   + (f" --limit {args.limit}" if args.limit else "") + (f" --rounds {args.rounds}" if args.rounds > 1 else "")
                   + (f" --out {args.out}" if args.out else ""),
        "date": dt.datetime.now(dt.timezone.utc).strftime("%Y-%m-%d %H:%M UTC"),
        "machine": f"{platform.machine()}, {os.cpu_count()} cores, Python {platform.python_version()}; broker, "
                   "worker, Alertmanager and producer on the same machine",
        "load_average_before": round(load_before, 2),
        "worker": "telesum worker --incident-only, exactly-once, commit interval 0.2 s, 4 partitions keyed by "
                  "topology component, room defaults; TELESUM_ALERTMANAGER_RESEND_S=10, timeout 10 s",
        "alertmanager": "v0.35.0 built by scripts/alertmanager.sh, group_by [incident_id], group_wait 0s, "
                        "group_interval 1s, webhook receiver recording",
        "paced": paced, "backlog": backlog, "in_process": in_process, "raw": {k: [round(v, 4) for v in values] for k, values in raw.items()}}
    text = json.dumps(report, indent=2)
    print(text)
    if args.out:
        args.out.write_text(text + "\n")
        chart(report, args.out.with_suffix(".png"))
    return 0


if __name__ == "__main__":
    sys.exit(main())
