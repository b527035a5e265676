"""One `telesum bench faults` scenario: its settings and the seeded schedule of its faults."""

from __future__ import annotations

import random
from dataclasses import dataclass, field


@dataclass
class Plan:
    records: int = 60
    huge_bytes: int = 1 << 20
    kills: int = 2
    rebalance: bool = True
    broker_restart: bool = False   # needs a broker of the harness's own (`--broker-port`)
    guarantee: str = "exactly-once"
    seed: int = 0
    produce_rate: float = 0.0      # inputs per second; 0 = all at once
    timeout_s: float = 600.0
    worker_args: dict[str, str] = field(default_factory=dict)
    stream: str = "records"        # or "log-lines": raw syslog lines answered per host window; or "hostile":
                                   # records, log lines and every hostile input (faults_hostile)
    hostile_scale: str = "ci"      # hostile: "ci" or "full" (faults_hostile.CI / FULL)
    window_s: float = 1.0          # log-lines: the worker's --window-s
    window_max_lines: int = 16     # log-lines: the worker's --window-max-lines
    stall_s: float = 60.0          # a partition idle this long while it holds an unanswered input stalled
    defaults: bool = False         # the worker as users start it: embedded model, default settings


def fault_schedule(plan: Plan, total: int, can_restart_broker: bool) -> list[tuple[str, float]]:
    """(fault, mark) in the order they happen: each fault after `mark` of the `total` inputs got answers.
    Seeded by the plan, so a scenario replays."""
    rng = random.Random(plan.seed)
    events = ["kill"] * plan.kills + (["broker"] if plan.broker_restart and can_restart_broker else [])
    rng.shuffle(events)
    if plan.rebalance:  # the second worker joins somewhere in the first half and leaves later
        at = rng.randrange(len(events) // 2 + 1)
        events.insert(at, "rebalance")
        events.insert(rng.randrange(at + 1, len(events) + 1), "unbalance")
    marks = sorted(rng.uniform(0.05, 0.85) * total for _ in events)
    return list(zip(events, marks))
