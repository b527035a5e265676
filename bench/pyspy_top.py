"""Sum a py-spy profile of a whole command: samples per process and thread, and each one's top frames.

    py-spy record -r 50 --idle --threads --subprocesses -f raw -o spy.txt -- python -m worker.cli summarize ...
    python bench/pyspy_top.py spy.txt [TOP]

With --idle, a thread's samples are wall time (waiting included), which is what shows a thread that
holds up the others. Inclusive: a frame counts once per sample it is anywhere in; leaves: where the
sample was taken.
"""

from __future__ import annotations

import collections
import sys

THREADS_SHOWN = 14


def summarise(path: str, top: int = 40) -> str:
    samples: collections.Counter[str] = collections.Counter()
    inclusive: dict[str, collections.Counter[str]] = collections.defaultdict(collections.Counter)
    leaves: dict[str, collections.Counter[str]] = collections.defaultdict(collections.Counter)
    with open(path) as fh:
        for line in fh:
            stack, count = line.rstrip("\n").rsplit(" ", 1)
            n = int(count)
            frames = stack.split(";")
            # py-spy puts the process (with --subprocesses) and the thread (with --threads) first
            head = [f for f in frames[:3] if f.startswith(("process", "thread"))]
            key, body = " | ".join(head)[:120], frames[len(head):]
            samples[key] += n
            for frame in set(body):
                inclusive[key][frame] += n
            if body:
                leaves[key][body[-1]] += n
    out = []
    for key, n in samples.most_common(THREADS_SHOWN):
        out.append(f"\n=== {key}: {n} samples")
        out += [f"  {c:7d} {100 * c / n:5.1f}% {f[:160]}" for f, c in inclusive[key].most_common(top)]
        out.append("  -- leaves:")
        out += [f"  {c:7d} {100 * c / n:5.1f}% {f[:160]}" for f, c in leaves[key].most_common(12)]
    return "\n".join(out)


def held_shares(path: str, rate: float, seconds: float) -> dict[str, float]:
    """A `py-spy record --gil` profile: each thread's samples against `rate` × `seconds`, the share of
    the wall it held the GIL (their sum near 1: the process's Python is its limit), largest first."""
    held: collections.Counter[str] = collections.Counter()
    with open(path) as fh:
        for line in fh:
            stack, count = line.rstrip("\n").rsplit(" ", 1)
            held[next((f for f in stack.split(";")[:2] if f.startswith("thread")), "?")] += int(count)
    return {thread: n / (rate * seconds) for thread, n in held.most_common()}


if __name__ == "__main__":
    print(summarise(sys.argv[1], int(sys.argv[2]) if len(sys.argv) > 2 else 40))
