"""Length profiles: how many words each generated record gets, and of which kind it is."""

from __future__ import annotations

import math
import random

PROFILES = ("mixed", "uniform", "oam", "short")
KINDS = ("ves", "syslog", "pm", "trace")
SHORT = (45, 130)
LONG = (1820, 2000)
UNIFORM = (50, 1900)
OAM_MIN, OAM_MAX = 50, 38_000  # ~50,000 tokens at ~1.3 tokens per word
# Largest shortfall of each generator below the words asked for (a record is never longer): the
# target is drawn this far above a range's floor so that every record lands inside the range.
SHORTFALL = {"ves": 8, "syslog": 20, "pm": 36, "trace": 12}


def word_range(profile: str, index: int, rng: random.Random) -> tuple[int, int]:
    """The (min, max) words record `index` of `profile` must have. Raises ValueError on an unknown profile."""
    if profile == "mixed":
        return SHORT if index % 2 == 0 else LONG  # interleaved: short, long, short, ...
    if profile == "uniform":
        return UNIFORM
    if profile == "short":  # demos and CI: only the short half of `mixed`
        return SHORT
    if profile == "oam":
        if rng.random() < 0.9:  # the body of the distribution: a few hundred words
            words = int(min(2000.0, max(OAM_MIN, rng.lognormvariate(math.log(250), 0.8))))
        else:  # the long tail, log-uniform up to the cap
            words = int(math.exp(rng.uniform(math.log(2000), math.log(OAM_MAX))))
        return OAM_MIN, words
    raise ValueError(f"unknown profile {profile!r}; choose one of {', '.join(PROFILES)}")


def pick(profile: str, index: int, rng: random.Random, kinds: tuple[str, ...] = KINDS) -> tuple[str, int]:
    """(kind, target words) for record `index`; records over 2,000 words in `oam` are logs, not VES."""
    low, high = word_range(profile, index, rng)
    choices = tuple(k for k in kinds if k != "ves") if high > 2000 and profile == "oam" else kinds
    kind = rng.choice(choices or kinds)
    if profile == "oam":
        return kind, max(high, low + SHORTFALL[kind])
    return kind, rng.randint(min(low + SHORTFALL[kind], high), high)
