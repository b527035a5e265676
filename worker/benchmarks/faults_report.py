"""The report of one `telesum bench faults` scenario: what is missing or duplicated, how fast the
inputs were answered (each kind's time to first answer, the partitions idle while they had work:
`faults_latency`), and what became of the huge record."""

from __future__ import annotations

from pathlib import Path

import msgspec
import numpy as np

from worker.benchmarks.faults_answers import AnswerReader
from worker.benchmarks.faults_latency import first_answer_s, idle_with_work, stalled
from worker.benchmarks.faults_plan import Plan


def scenario_report(plan: Plan, answers: AnswerReader, sent: dict[tuple[int, int], tuple[float, int]], *,
                    total: int, topics: tuple[str, str, str], with_huge: bool, logs: list[Path],
                    done_faults: list[tuple[str, int]], codes: list[int], finished_s: float,
                    kinds: dict[tuple[int, int], str] | None = None, ended_at: float | None = None) -> dict:
    """Missing inputs, duplicates, latencies (answer time minus produce time) per kind, the partitions
    idle with work (stalled past plan.stall_s), faults and exit codes."""
    huge_key = next((k for k, (_, size) in sent.items() if size >= plan.huge_bytes), None) if with_huge else None
    latencies = {k: min(ts) - sent[k][0] for k, ts in answers.times.items() if k in sent}
    answered_at = sorted(min(ts) for ts in answers.times.values())
    short = [v for k, v in latencies.items() if k != huge_key]
    aborts = sum(Path(p).read_text(errors="replace").count("terminate called") for p in logs)
    first = {k: min(ts) for k, ts in answers.times.items()}
    answer_kinds = {k: "dead_letter" if topic == topics[2] else "summary" for k, (topic, _) in answers.first.items()}
    idle = idle_with_work(sent, first, ended_at if ended_at is not None else max(first.values(), default=0.0))
    t_first = min((at for at, _ in sent.values()), default=0.0)
    return {
        "guarantee": plan.guarantee, "inputs": total, "answered": len(set(answers.times) & set(sent)),
        "missing": sorted(set(sent) - set(answers.times)),
        "duplicates": sum(count - 1 for count in answers.parts.values()),
        "faults": done_faults, "exit_codes": codes, "native_aborts": aborts,
        "seconds": round(finished_s, 1),
        # first to last answer: the worker's start-up stays out
        "records_per_s": round((len(answered_at) - 1) / (answered_at[-1] - answered_at[0]), 2)
        if len(answered_at) > 1 and answered_at[-1] > answered_at[0] else None,
        "short_latency_s": {"p50": _pct(short, 50), "p99": _pct(short, 99), "max": max(short, default=None)},
        "first_answer_s": first_answer_s(sent, kinds or {}, first, answer_kinds),
        # every input: [partition, offset, kind, produced (s after the first), first answer (s after
        # it was produced; None: never), answer kind]
        "inputs_first_answer": [[p, o, (kinds or {}).get((p, o), "record"), round(at - t_first, 3),
                                 round(first[(p, o)] - at, 3) if (p, o) in first else None,
                                 answer_kinds.get((p, o))] for (p, o), (at, _) in sorted(sent.items())],
        "idle_with_work_s": idle,
        "stalled_partitions": stalled(idle, plan.stall_s),
        "stall_s": plan.stall_s,
        "huge_latency_s": latencies.get(huge_key) if huge_key else None,
        "huge_answer": _describe(answers.first.get(huge_key), topics) if huge_key else None,
        "reader_error": repr(answers.error) if answers.error else None,
    }


def _describe(answer: tuple[str, bytes] | None, topics: tuple[str, str, str]) -> dict | None:
    if answer is None:
        return None
    body = msgspec.json.decode(answer[1])
    if answer[0] == topics[2]:
        return {"dead_letter": body.get("reason")}
    return {"summary": True, "hierarchical": body.get("hierarchical"), "chunks": body.get("chunks"),
            "selection": body.get("selection")}


def _pct(values: list[float], q: float) -> float | None:
    return round(float(np.percentile(values, q)), 3) if values else None


def hostile_chart(report: dict, png: Path) -> None:
    """The hostile stream's figures as a chart: inputs answered, missing and duplicated per scenario,
    and the workers' resident memory, idle and peak, against the 1 GiB bound above idle."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    scenarios = report["scenarios"]
    fig, (counts, memory) = plt.subplots(1, 2, figsize=(10, 4))
    names = list(scenarios)
    for i, name in enumerate(names):
        s = scenarios[name]
        counts.bar([i - 0.25, i, i + 0.25], [s["answered"], len(s["missing"]), s["duplicates"]], width=0.25,
                   color=["tab:green", "tab:red", "tab:orange"])
    counts.set_xticks(range(len(names)), names)
    counts.set_title("inputs: answered (green), missing (red), duplicated (orange)")
    for i, name in enumerate(names):
        m = scenarios[name].get("memory_mb") or {}
        memory.bar([i - 0.2, i + 0.2], [m.get("idle", 0), m.get("peak", 0)], width=0.4, color=["tab:blue", "tab:purple"])
        memory.axhline(m.get("idle", 0) + 1024, color="tab:red", linestyle=":")
    memory.set_xticks(range(len(names)), names)
    memory.set_title("worker RSS, MB: idle, peak (dotted: idle + 1 GiB)")
    fig.suptitle(report["command"], fontsize=7)
    fig.tight_layout()
    fig.savefig(png, dpi=110)


def first_answer_chart(scenarios: dict[str, dict], png: Path, title: str) -> None:
    """Each input's time to its first answer against when it was produced, one panel per scenario,
    one colour per kind of input; an input never answered is drawn at the top in red."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    colours = {"record": "tab:blue", "log_line": "tab:green", "hostile": "tab:orange", "huge": "tab:purple"}
    fig, axes = plt.subplots(1, len(scenarios), figsize=(5.5 * len(scenarios), 4), sharey=True, squeeze=False)
    for ax, (name, s) in zip(axes[0], scenarios.items()):
        rows = s.get("inputs_first_answer") or []
        top = max((r[4] for r in rows if r[4] is not None), default=1.0) * 1.05
        for kind, colour in colours.items():
            xs = [r[3] for r in rows if r[2] == kind and r[4] is not None]
            ys = [r[4] for r in rows if r[2] == kind and r[4] is not None]
            if xs:
                ax.scatter(xs, ys, s=12, color=colour, label=kind)
        missing = [r[3] for r in rows if r[4] is None]
        if missing:
            ax.scatter(missing, [top] * len(missing), s=14, color="tab:red", marker="x", label="never answered")
        stalled = s.get("stalled_partitions") or []
        ax.set_title(f"{name}: stalled partitions {stalled or 'none'}", fontsize=9)
        ax.set_xlabel("produced at (s)")
        ax.axhline(s.get("stall_s", 60.0), color="tab:red", linestyle=":", linewidth=1)
    axes[0][0].set_ylabel("time to first answer (s)")
    axes[0][0].legend(fontsize=7)
    fig.suptitle(title, fontsize=7)
    fig.tight_layout()
    fig.savefig(png, dpi=110)
    plt.close(fig)
