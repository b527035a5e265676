"""What users of `telesum bench faults` feel: each input's time to its first answer, per kind of input
and per kind of answer, and the partitions that stopped answering while they had work.

An input's time to first answer is its first answer's timestamp minus its own (both set by the
clients that sent them). A partition *stalls* when, for `stall_s` or longer, two or more of its
inputs wait for their answers and it gives no answer at all: the longest such stretch per partition
is reported, so a slow input that holds every later input of its partition (issue 39) fails the run
while one that only delays its own answer does not. An input never answered counts as unanswered to
the end of the run.
"""

from __future__ import annotations

from collections.abc import Mapping

import numpy as np

# Input kinds, by the key the harness sends each input with (faults_inputs, faults_hostile).
KINDS = ("record", "log_line", "hostile", "huge")


def input_kind(key: bytes | None) -> str:
    """The kind of an input the harness produced, from its key: `r<i>` a realistic record, `h<i>` and
    `x-<name>` a hostile input, `huge` the huge record, a host name a raw log line."""
    key = key or b""
    if key == b"huge":
        return "huge"
    if (key[:1] == b"h" and key[1:].isdigit()) or key.startswith(b"x-"):
        return "hostile"
    if key[:1] == b"r" and key[1:].isdigit():
        return "record"
    return "log_line"


def first_answer_s(sent: Mapping[tuple[int, int], tuple[float, int]], kinds: Mapping[tuple[int, int], str],
                   answered_at: Mapping[tuple[int, int], float], answer_kinds: Mapping[tuple[int, int], str]) -> dict:
    """p50/p99/max of the time to first answer, per input kind and per answer kind (summary,
    dead_letter); `unanswered` counts inputs of a kind with no answer."""
    by_input: dict[str, list[float]] = {}
    by_answer: dict[str, list[float]] = {}
    unanswered: dict[str, int] = {}
    for key, (produced, _) in sent.items():
        kind = kinds.get(key, "record")
        if key not in answered_at:
            unanswered[kind] = unanswered.get(kind, 0) + 1
            by_input.setdefault(kind, [])
            continue
        waited = answered_at[key] - produced
        by_input.setdefault(kind, []).append(waited)
        by_answer.setdefault(answer_kinds.get(key, "summary"), []).append(waited)
    return {"by_input": {k: {**_stats(v), "unanswered": unanswered.get(k, 0)} for k, v in sorted(by_input.items())},
            "by_answer": {k: _stats(v) for k, v in sorted(by_answer.items())}}


def idle_with_work(sent: Mapping[tuple[int, int], tuple[float, int]], answered_at: Mapping[tuple[int, int], float],
                   end: float) -> dict[int, dict]:
    """Per partition, the longest stretch without an answer while two inputs or more wait for theirs
    (one input in progress is a slow input, not a stalled partition): {"idle_s", "from" (seconds
    since the first input), "waiting" (inputs unanswered at its end)}."""
    start = min((produced for produced, _ in sent.values()), default=end)
    events: dict[int, list[tuple[float, int]]] = {}  # partition -> (time, +1 produced / -1 answered)
    for (partition, offset), (produced, _) in sent.items():
        events.setdefault(partition, []).append((produced, 1))
        events[partition].append((answered_at.get((partition, offset), end), -1))
    out: dict[int, dict] = {}
    for partition, timeline in sorted(events.items()):
        timeline.sort(key=lambda e: (e[0], e[1]))  # an answer at the moment of a produce comes first
        waiting, since, best = 0, None, {"idle_s": 0.0, "from": 0.0, "waiting": 0}
        for at, step in timeline:
            if step < 0 and since is not None and at - since > best["idle_s"]:
                best = {"idle_s": round(at - since, 2), "from": round(since - start, 2), "waiting": waiting}
            waiting += step
            if step < 0:  # an answer: a stretch restarts here if two or more still wait
                since = at if waiting >= 2 else None
            elif waiting >= 2 and since is None:
                since = at
        out[partition] = best
    return out


def stalled(idle: Mapping[int, dict], stall_s: float) -> list[int]:
    """Partitions whose longest stretch idle with work reached `stall_s`."""
    return [partition for partition, found in idle.items() if found["idle_s"] >= stall_s]


def _stats(values: list[float]) -> dict:
    if not values:
        return {"count": 0, "p50": None, "p99": None, "max": None}
    return {"count": len(values), "p50": round(float(np.percentile(values, 50)), 3),
            "p99": round(float(np.percentile(values, 99)), 3), "max": round(max(values), 3)}
