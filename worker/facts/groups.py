"""Many log messages as a few templates with counts, time spans and the values that varied.

Every message is split into words; a word holding a digit (addresses, ports, ids, counters) is a
variable. Messages whose words are equal but for the variables form one group. With many messages
(`DRAIN_MIN_MESSAGES`), the distinct groups are clustered once more by drain3's template miner,
which also merges messages that differ in words without digits (`Invalid user admin` / `Invalid
user oracle`). drain3 sees each distinct group once, not every line, and only the DRAIN_MAX_GROUPS
largest: its match compares a group with every cluster of its tree leaf, so its cost grows with the
square of the distinct groups (a 1 MB window of distinct lines took 58 s, 5 MB ~25 min); the smaller
groups beyond the bound stay as they are.

A group reads back as its template with each variable rendered: the value when it never changed,
else `6 addresses`, `3-97` (numbers), `admin, oracle and 7 others` (words); `port N` pairs whose number
varied are dropped (a client's source port says nothing to an operator).
"""

from __future__ import annotations

import re
from collections import Counter
from dataclasses import dataclass, field
from datetime import datetime

from drain3.drain import Drain

from worker.facts.common import SEVERITY_RANK

DRAIN_MIN_MESSAGES = 32
# The distinct groups drain3 clusters, the largest first (see the module docstring); with random-word
# lines each group is one line, and 512 of them cluster in ~0.2 s on one core.
DRAIN_MAX_GROUPS = 512
DRAIN_SIMILARITY = 0.5  # drain3's default 0.4 merges `session opened` with `session closed`
MAX_VALUES_KEPT = 256   # distinct values remembered per variable; beyond it only "many"
# A match starts a run: the lookbehinds keep searches linear (issue 27) and change no match.
_VARIABLE = re.compile(r"(?<![\w.:/+-])[\w.:/+-]*\d[\w.:/+-]*+")
_ADDRESS = re.compile(r"(?:\d{1,3}\.){3}\d{1,3}(?::\d+)?|[0-9a-fA-F]{0,4}(?::[0-9a-fA-F]{0,4}){2,7}")
_NUMBER = re.compile(r"[-+]?\d+(?:\.\d+)?%?")
_EDGE_PUNCT = re.compile(r"^((?:[A-Za-z_][\w.-]*=)?[\[(\"'<]*)(.*?)([\])\"'>,;:.!?]*)$")
_WILD = "<*>"
_DIGITS = re.compile(r"\d{3,}")
_EMPTY_KEY = re.compile(r"(?<![\w.-])[A-Za-z_][\w.-]*+=")


@dataclass
class Group:
    """Messages of one template. `values[i]` counts the words seen at variable position i."""

    app: str | None
    words: list[str]
    count: int = 0
    severity: str = "info"
    first: datetime | None = None
    last: datetime | None = None
    hosts: Counter = field(default_factory=Counter)
    values: dict[int, Counter] = field(default_factory=dict)

    def add(self, words: list[str], severity: str, when: datetime | None, host: str | None, n: int = 1) -> None:
        self.count += n
        if SEVERITY_RANK[severity] < SEVERITY_RANK[self.severity]:
            self.severity = severity
        if when is not None:
            self.first = when if self.first is None or when < self.first else self.first
            self.last = when if self.last is None or when > self.last else self.last
        if host:
            self.hosts[host] += n
        for i, word in enumerate(words):
            if i < len(self.words) and _WILD in self.words[i]:
                counter = self.values.setdefault(i, Counter())
                if word in counter or len(counter) < MAX_VALUES_KEPT:
                    counter[word] += n

    def merge(self, other: Group) -> None:
        self.count += other.count
        if SEVERITY_RANK[other.severity] < SEVERITY_RANK[self.severity]:
            self.severity = other.severity
        for when in (other.first, other.last):
            if when is not None:
                self.first = when if self.first is None or when < self.first else self.first
                self.last = when if self.last is None or when > self.last else self.last
        self.hosts.update(other.hosts)
        for i, word in enumerate(other.words):
            counter = self.values.setdefault(i, Counter())
            if _WILD in word:
                for value, n in other.values.get(i, {}).items():
                    if value in counter or len(counter) < MAX_VALUES_KEPT:
                        counter[value] += n
            elif word in counter or len(counter) < MAX_VALUES_KEPT:
                counter[word] += other.count

    def text(self) -> str:
        """The template with its variables rendered (see the module docstring)."""
        out: list[str] = []
        for i, word in enumerate(self.words):
            counter = self.values.get(i)
            if counter is None or len(counter) == 0 or len(counter) == 1:
                value = next(iter(counter)) if counter else word
                if not _EMPTY_KEY.fullmatch(value):  # `ruser=` with nothing: noise
                    out.append(value)
                continue
            if out and out[-1].lower() == "port" and all(_NUMBER.fullmatch(v) for v in counter):
                out.pop()  # `port 45378` that varied (a switch's `port Ethernet1/12` is kept)
                continue
            out.append(_summarise(counter))
        return " ".join(out)

    def main_host(self) -> str | None:
        return _most_common(self.hosts)


def _most_common(counter: Counter) -> str | None:
    """The most frequent key, the earliest seen on ties."""
    if not counter:
        return None
    top = max(counter.values())
    return next(k for k, n in counter.items() if n == top)


def _summarise(counter: Counter) -> str:
    """Several values of one variable in a few words: `6 addresses`, `91-97%`, `a, b and 3 others`."""
    parts = [_EDGE_PUNCT.match(v).groups() for v in counter]
    lead = parts[0][0] if all(p[0] == parts[0][0] for p in parts) else ""
    tail = parts[0][2] if all(p[2] == parts[0][2] for p in parts) else ""
    cores = [p[1] for p in parts]
    many = "many" if len(counter) >= MAX_VALUES_KEPT else str(len(counter))
    if all(_ADDRESS.fullmatch(c) for c in cores):
        return f"{lead}{many} addresses{tail}"
    if all(_NUMBER.fullmatch(c) for c in cores):
        numbers = [float(c.rstrip("%")) for c in cores]
        unit = "%" if cores[0].endswith("%") else ""
        return f"{lead}{min(numbers):g}{unit}-{max(numbers):g}{unit}{tail}"
    if all(_DIGITS.search(c) for c in cores):  # ids and counters: their shape is enough
        shapes = {_DIGITS.sub("N", c) for c in cores}
        if len(shapes) == 1:
            return f"{lead}{shapes.pop()}{tail}"
    ranked = [c for c, _ in sorted(zip(cores, counter.values()), key=lambda cv: -cv[1])]
    if len(ranked) == 2:
        return f"{lead}{ranked[0]} or {ranked[1]}{tail}"
    others = "many others" if many == "many" else (
        "1 other" if len(ranked) == 3 else f"{len(ranked) - 2} others")
    return f"{lead}{ranked[0]}, {ranked[1]} and {others}{tail}"


def _mask(words: list[str]) -> tuple[str, ...]:
    return tuple(_VARIABLE.sub(_WILD, w) if any(ch.isdigit() for ch in w) else w for w in words)


def group_messages(messages) -> list[Group]:
    """Groups of `(app, text, severity, time, host)` messages, the largest first."""
    by_key: dict[tuple, Group] = {}
    for app, text, severity, when, host in messages:
        words = text.split()
        key = (app, _mask(words))
        group = by_key.get(key)
        if group is None:
            group = by_key[key] = Group(app, list(key[1]))
        group.add(words, severity, when, host)
    groups = list(by_key.values())
    if len(groups) > 1 and sum(g.count for g in groups) >= DRAIN_MIN_MESSAGES:
        groups.sort(key=lambda g: -g.count)
        groups = _cluster(groups[:DRAIN_MAX_GROUPS]) + groups[DRAIN_MAX_GROUPS:]
    groups.sort(key=lambda g: -g.count)
    return groups


def _cluster(groups: list[Group]) -> list[Group]:
    """Merge groups (the largest first) that drain3 puts in one cluster (per app: the app is the
    first token)."""
    drain = Drain(depth=4, sim_th=DRAIN_SIMILARITY, max_children=100)
    members: dict[int, list[Group]] = {}
    for group in groups:  # largest first: big groups shape the templates
        cluster, _ = drain.add_log_message(" ".join([group.app or "-", *group.words]) if group.words else
                                           group.app or "-")
        members.setdefault(cluster.cluster_id, []).append(group)
    merged: list[Group] = []
    for cluster in drain.clusters:
        parts = members.get(cluster.cluster_id, [])
        if not parts:
            continue
        template = list(cluster.log_template_tokens[1:])
        target = Group(parts[0].app, template)
        for part in parts:
            if len(part.words) == len(template):
                target.merge(part)
            else:  # drain3 clusters equal lengths only; kept apart to be safe
                merged.append(part)
        if target.count:
            merged.append(target)
    return merged
