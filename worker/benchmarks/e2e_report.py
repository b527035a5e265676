"""The result of one `telesum bench e2e` run: the object `--json` prints, the table, the chart."""

from __future__ import annotations

import os
import platform
import time

from worker.benchmarks.e2e_stages import StageTimer


def _pct(values: list[float], q: float) -> float | None:
    if not values:
        return None
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))]


def build_result(args, model_name, ids, answers, latencies, summaries, timer: StageTimer, window_s, produce_s,
                 model_load_s, warmup_s, join_s, load_before, load_after, stats) -> dict:
    """The object `--json` prints: records/s, answers, latencies, and where the time goes per stage."""
    n = len(ids)
    stages = []
    for thread in ("worker", "engine"):
        named = {k: v for k, v in timer.seconds.items() if k.startswith(thread + ":")}
        for key, secs in sorted(named.items(), key=lambda kv: -kv[1]):
            stages.append({"thread": thread, "stage": key.split(":", 1)[1], "calls": timer.calls[key],
                           "seconds": round(secs, 4), "ms_per_record": round(1000 * secs / n, 3),
                           "share_of_window": round(secs / window_s, 4)})
        rest = window_s - sum(named.values())
        stages.append({"thread": thread, "stage": "untimed (loop code, idle)", "calls": 0,
                       "seconds": round(rest, 4), "ms_per_record": round(1000 * rest / n, 3),
                       "share_of_window": round(rest / window_s, 4)})

    def mean(values):
        return round(sum(values) / len(values), 5) if values else None

    timings = {name: mean([getattr(s.timings, name) for s in summaries])
               for name in ("queued_s", "prefill_s", "decode_s", "total_s")}
    acks = timer.ack_latencies
    return {
        "benchmark": "e2e", "date": time.strftime("%Y-%m-%dT%H:%M:%S%z"),
        "machine": {"platform": platform.platform(), "processor": platform.processor() or platform.machine(),
                    "cpus": os.cpu_count(), "load_avg_before": [round(x, 2) for x in load_before],
                    "load_avg_after": [round(x, 2) for x in load_after], "torch_threads": _torch_threads()},
        "config": {"records": n, "profile": args.profile, "seed": args.seed, "model": model_name,
                   "max_new_tokens": args.max_new_tokens, "token_budget": args.token_budget,
                   "max_context": args.max_context, "partitions": args.partitions},
        "records_per_s": round(n / window_s, 3), "window_s": round(window_s, 3),
        "produce_s": round(produce_s, 3), "model_load_s": round(model_load_s, 3),
        "warmup_s": round(warmup_s, 3), "group_join_s": round(join_s, 3),
        "answered": len(set(answers) & set(ids)), "missing": sorted(set(ids) - set(answers)),
        "duplicates": sum(c - 1 for c in answers.values()), "summaries": len(summaries),
        "dead_letters": sum(answers.values()) - len(summaries),
        "latency_ms": {"p50": _pct(latencies, 0.5), "p95": _pct(latencies, 0.95), "max": max(latencies, default=None)},
        "publish_ack_ms": {"mean": round(1000 * sum(acks) / len(acks), 2) if acks else None,
                           "p95": round(1000 * _pct(acks, 0.95), 2) if acks else None},
        "hierarchical": sum(s.hierarchical for s in summaries),
        "tokens_per_record": {"prompt": mean([s.prompt_tokens for s in summaries]),
                              "prompt_max": max((s.prompt_tokens for s in summaries), default=None),
                              "output": mean([s.output_tokens for s in summaries])},
        "summary_timings_mean_s": timings,
        "worker_stats": {"commits": stats.commits, "backpressure_pauses": stats.backpressure_pauses,
                         "drained_cleanly": stats.drained_cleanly} if stats else None,
        "stages": stages,
    }


def _torch_threads() -> int:
    import torch

    return torch.get_num_threads()


# -- output ----------------------------------------------------------------------------------
def format_table(r: dict) -> str:
    c, m = r["config"], r["machine"]
    lines = [
        f"e2e: {c['records']} records ({c['profile']}), model {c['model']}, {c['max_new_tokens']} new tokens, "
        f"{c['partitions']} partition(s); {m['cpus']} CPUs, load {m['load_avg_before'][0]} -> {m['load_avg_after'][0]}",
        f"  {r['records_per_s']:.2f} records/s end to end ({r['window_s']:.2f} s first produce -> last answer; "
        f"produce {r['produce_s']:.2f} s)",
        f"  answered {r['answered']}/{c['records']} ({r['summaries']} summaries, {r['dead_letters']} dead letters, "
        f"{r['duplicates']} duplicates, {r['hierarchical']} hierarchical); latency p50 {r['latency_ms']['p50']} ms, p95 {r['latency_ms']['p95']} ms",
        f"  outside the window: model load {r['model_load_s']:.2f} s, warm-up {r['warmup_s']:.2f} s, "
        f"group join {r['group_join_s']:.2f} s",
        f"  per record (Summary.timings, mean): {r['summary_timings_mean_s']}; tokens {r['tokens_per_record']}; "
        f"publish->ack {r['publish_ack_ms']} ms",
        "  where the time goes (exclusive wall time per thread over the window):",
        f"    {'thread':7} {'stage':34} {'calls':>7} {'seconds':>9} {'ms/record':>10} {'share':>6}",
    ]
    for s in r["stages"]:
        lines.append(f"    {s['thread']:7} {s['stage']:34} {s['calls']:>7} {s['seconds']:>9.3f} "
                     f"{s['ms_per_record']:>10.3f} {100 * s['share_of_window']:>5.1f}%")
    if r["missing"]:
        lines.append(f"  MISSING answers for {len(r['missing'])} ids, e.g. {r['missing'][:5]}")
    return "\n".join(lines)


def draw_chart(r: dict, path: str) -> None:
    """Horizontal bars: each thread's share of the window per stage."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(1, 2, figsize=(13, 5.5))
    for ax, thread in zip(axes, ("worker", "engine")):
        rows = [s for s in r["stages"] if s["thread"] == thread and s["seconds"] > 0][::-1]
        ax.barh([s["stage"] for s in rows], [100 * s["share_of_window"] for s in rows], color="tab:blue")
        ax.set_xlabel("% of the end-to-end window (exclusive wall time)")
        ax.set_title(f"{thread} thread")
        ax.set_xlim(0, 100)
    c = r["config"]
    fig.suptitle(f"telesum bench e2e: {r['records_per_s']:.2f} records/s, {c['records']} {c['profile']} records, "
                 f"{c['model']}, {c['max_new_tokens']} new tokens; load avg {r['machine']['load_avg_before'][0]}")
    fig.tight_layout()
    fig.savefig(path, dpi=110)
