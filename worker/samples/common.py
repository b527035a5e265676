"""Shared pieces of the sample generators: element names, clock, truth facts, word counting."""

from __future__ import annotations

import random
from datetime import datetime, timedelta, timezone

from worker.messages import Facts, TelemetryRecord
from worker.prompts import render_body

# Generated telemetry starts here, so that a seed gives the same records on every run.
EPOCH = datetime(2026, 11, 29, 0, 0, 0, tzinfo=timezone.utc)
RECORD_SPACING_S = 37  # each record starts a little later than the one before


def count_words(record: TelemetryRecord) -> int:
    """Words of the body as the model reads it (whitespace-separated, VES objects flattened)."""
    return len(render_body(record).split())


def record_start(index: int, rng: random.Random) -> datetime:
    return EPOCH + timedelta(seconds=index * RECORD_SPACING_S + rng.uniform(0, 20))


def iso_ms(dt: datetime) -> str:
    return dt.astimezone(timezone.utc).strftime("%Y-%m-%dT%H:%M:%S.") + f"{dt.microsecond // 1000:03d}Z"


def iso_s(dt: datetime) -> str:
    return dt.astimezone(timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")


def gnb(rng: random.Random) -> str:
    return f"gNB-{rng.randrange(1, 4000):04d}"


def site_of(element: str) -> str:
    return f"site-{sum(map(ord, element)) % 97:02d}"


def truth(entity: str, severity: str, problem: str, keywords: list[str], first: datetime,
          last: datetime, count: int, **details: str) -> Facts:
    """Ground-truth facts for a generated record. `details['problemKeywords']` lists the words
    (lower case, comma-separated) a summary must contain to have named the problem."""
    return Facts(entity=entity, severity=severity, problem=problem, first_seen=iso_s(first),
                 last_seen=iso_s(last), event_count=count,
                 details={"problemKeywords": ", ".join(keywords), **details})
