"""Summarise a py-spy raw profile (`py-spy record --gil --threads -f raw`): samples per thread, and per
thread the functions holding the GIL, by self and by inclusive samples.

    py-spy record --gil --threads -r 250 -f raw -o gil.txt -- python bench/gpu_job.py ... --only KEY
    python bench/spy_summary.py gil.txt [--top 25] [--only-under results_in_order,_feed,run]
"""

from __future__ import annotations

import argparse
import collections
import re
from pathlib import Path

_LINE = re.compile(r"^(.*) (\d+)$")
_FRAME = re.compile(r"^(.*?) \((.*?)(?::\d+)?\)$")


def frame_name(frame: str) -> str:
    """'func (path/file.py:12)' -> 'func (file.py)'."""
    m = _FRAME.match(frame)
    return f"{m.group(1)} ({Path(m.group(2)).name})" if m else frame


def summarise(path: Path, top: int) -> str:
    per_thread: collections.Counter[str] = collections.Counter()
    self_time: dict[str, collections.Counter[str]] = collections.defaultdict(collections.Counter)
    inclusive: dict[str, collections.Counter[str]] = collections.defaultdict(collections.Counter)
    total = 0
    for line in path.read_text().splitlines():
        m = _LINE.match(line)
        if not m:
            continue
        frames, count = m.group(1).split(";"), int(m.group(2))
        thread, names = frames[0], [frame_name(f) for f in frames[1:]]
        total += count
        per_thread[thread] += count
        if names:
            self_time[thread][names[-1]] += count
            for name in set(names):
                inclusive[thread][name] += count
    out = [f"{total} samples holding the GIL"]
    for thread, n in per_thread.most_common():
        out.append(f"\n== {thread}: {n} samples ({n / total:.1%})")
        out.append("  self:")
        out += [f"    {c:7d} {c / n:6.1%}  {name}" for name, c in self_time[thread].most_common(top)]
        out.append("  inclusive:")
        out += [f"    {c:7d} {c / n:6.1%}  {name}" for name, c in inclusive[thread].most_common(top)]
    return "\n".join(out)


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("profile", type=Path)
    ap.add_argument("--top", type=int, default=25)
    args = ap.parse_args()
    print(summarise(args.profile, args.top))


if __name__ == "__main__":
    main()
