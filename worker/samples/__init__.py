"""Seeded sample telemetry with known facts: VES 7.x events, RFC 5424 syslog bursts, 32.435 PM XML,
NGAP/XnAP traces. Record i depends only on (seed, profile, i), so a longer run extends a shorter one.
"""

from __future__ import annotations

import math
import random
from collections.abc import Iterator

from worker.messages import Facts, TelemetryRecord
from worker.samples import logs_real, pm, syslog, trace, ves, ves_real
from worker.samples.common import count_words
from worker.samples.profiles import KINDS, PROFILES, pick, word_range

__all__ = ["KINDS", "PROFILES", "REAL_PROFILES", "STORM_PROFILES", "count_words", "generate", "iter_generate",
           "word_range"]

# Real-shaped profiles: host logs in every syslog shape and field-style VES/PM bodies (`real`,
# 5-300 lines or events), whole log files of 2,000-50,000 lines (`real-long`), or network gear,
# application logs, TS 28.532 PM files and VES alarms named outside specificProblem (`real-formats`).
REAL_PROFILES = ("real", "real-long", "real-formats")

# An alarm storm with a known root cause, and its network's past to learn from, for the incidents
# (`storm.py`); their records are keyed by site.
STORM_PROFILES = ("storm", "storm-history")

_MAKERS = {"ves": ves.make, "syslog": syslog.make, "pm": pm.make, "trace": trace.make}


def iter_generate(n: int | None, profile: str = "mixed", seed: int = 0,
                  kinds: tuple[str, ...] = KINDS) -> Iterator[tuple[TelemetryRecord, Facts]]:
    """Yields (record, ground-truth facts) for records 0..n-1 (forever when n is None).
    Raises ValueError on an unknown profile or kind, or a negative n."""
    if profile in REAL_PROFILES:
        yield from _iter_real(n, profile, seed)
        return
    if profile in STORM_PROFILES:
        from worker.samples.storm import storm_history_records, storm_records

        yield from (storm_records if profile == "storm" else storm_history_records)(n, seed)
        return
    if profile not in PROFILES:
        raise ValueError(f"unknown profile {profile!r}; choose one of {', '.join(PROFILES + REAL_PROFILES)}")
    unknown = [k for k in kinds if k not in _MAKERS]
    if unknown or not kinds:
        raise ValueError(f"unknown kinds {unknown}; choose from {', '.join(KINDS)}")
    if n is not None and n < 0:
        raise ValueError(f"n must be >= 0, got {n}")
    index = 0
    while n is None or index < n:
        rng = random.Random(f"{seed}:{profile}:{index}")  # str seeds hash the same on every run
        kind, target = pick(profile, index, rng, tuple(kinds))
        yield _MAKERS[kind](index, target, rng)
        index += 1


def _iter_real(n: int | None, profile: str, seed: int) -> Iterator[tuple[TelemetryRecord, Facts]]:
    if n is not None and n < 0:
        raise ValueError(f"n must be >= 0, got {n}")
    index = 0
    while n is None or index < n:
        rng = random.Random(f"{seed}:{profile}:{index}")
        if profile == "real-formats":
            from . import formats_real  # network gear, application logs, 28.532 PM, VES alarm names

            yield formats_real.make(index, int(math.exp(rng.uniform(math.log(6), math.log(80)))), rng)
        elif profile == "real-long":
            yield logs_real.make(index, int(math.exp(rng.uniform(math.log(2000), math.log(50_000)))), rng)
        elif index % 2 == 0:
            yield logs_real.make(index // 2, int(math.exp(rng.uniform(math.log(5), math.log(300)))), rng)
        else:
            yield ves_real.make(index // 2, rng.randrange(3, 40), rng)
        index += 1


def generate(n: int, profile: str = "mixed", seed: int = 0,
             kinds: tuple[str, ...] = KINDS) -> list[tuple[TelemetryRecord, Facts]]:
    """`n` (record, ground-truth facts) pairs; see iter_generate."""
    return list(iter_generate(n, profile, seed, kinds))
