"""A made-up alarm history with a known cause: power failures at sites of a ring take the radio links of
their neighbours down, and the links are often reported before the power alarm (the power alarm waits
out its integration time); temperature warnings come and go on their own."""

from __future__ import annotations

import random

from worker.incidents import Alarm, Topology

SITES = [f"site-{i:02d}" for i in range(12)]


def ring() -> Topology:
    return Topology(zip(SITES, SITES[1:] + SITES[:1]))


def history(seed: int = 7, faults: int = 60, noise: int = 400, link_first: float = 0.7) -> list[Alarm]:
    """Alarms over ~faults × 2 h in time order: each fault a POWER alarm on a site and, four times in
    five, LINK_DOWN on one or both neighbours within seconds (before the POWER alarm with probability
    `link_first`); TEMP_HIGH at random times and sites, a LINK_DOWN now and then without a fault."""
    rng = random.Random(seed)
    out = []
    for n in range(faults):
        start = n * 7200.0 + rng.uniform(0, 3000)
        site = rng.randrange(len(SITES))
        power_at = start + (rng.uniform(5, 30) if rng.random() < link_first else 0.0)
        out.append(Alarm(SITES[site], "POWER", power_at))
        if rng.random() < 0.8:
            for side in rng.sample((-1, 1), rng.choice((1, 2))):
                out.append(Alarm(SITES[(site + side) % len(SITES)], "LINK_DOWN", start + rng.uniform(0, 3)))
    span = faults * 7200.0
    for _ in range(noise):
        out.append(Alarm(rng.choice(SITES), "TEMP_HIGH", rng.uniform(0, span)))
    for _ in range(3):
        out.append(Alarm(rng.choice(SITES), "LINK_DOWN", rng.uniform(0, span)))
    out.sort(key=lambda a: a.time)
    return out
