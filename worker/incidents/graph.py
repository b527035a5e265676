"""The operator's knowledge the room correlates with: the element topology and the cause→effect rules.

Topology: undirected links between elements, from a CSV edge list (`element_a,element_b`), JSON (an
edge list, a node-link graph or an adjacency map) or GraphML. Rules: `cause_type,effect_type` pairs,
read transitively (A causes B and B causes C: A is a cause of C). Both files are optional.
"""

from __future__ import annotations

import csv
import json
import xml.etree.ElementTree as ET
from collections import deque
from collections.abc import Iterable
from pathlib import Path


class GraphFileError(ValueError):
    """A topology or rules file that cannot be read; the message names the file and the line."""


class Topology:
    """Undirected element links; `hops` and `ball` answer by breadth-first search, cached per element.
    Only from one thread (the cache is not locked)."""

    # The ball cache is dropped whole beyond this many cached entries: a large network's balls of
    # a few hops stay cached while they are reused, without growing with the network's square.
    MAX_CACHED_ENTRIES = 2_000_000

    def __init__(self, edges: Iterable[tuple[str, str]]) -> None:
        self.adjacent: dict[str, set[str]] = {}
        for a, b in edges:
            if a == b:
                continue
            self.adjacent.setdefault(a, set()).add(b)
            self.adjacent.setdefault(b, set()).add(a)
        self._balls: dict[tuple[str, int], dict[str, int]] = {}
        self._cached_entries = 0

    def __len__(self) -> int:
        return len(self.adjacent)

    @property
    def num_links(self) -> int:
        return sum(map(len, self.adjacent.values())) // 2

    def ball(self, element: str, radius: int) -> dict[str, int]:
        """Every element within `radius` hops of `element` (itself included, at 0) -> its hops."""
        key = (element, radius)
        found = self._balls.get(key)
        if found is None:
            found = {element: 0}
            frontier = deque([element])
            while frontier:
                here = frontier.popleft()
                depth = found[here]
                if depth == radius:
                    continue
                for there in self.adjacent.get(here, ()):
                    if there not in found:
                        found[there] = depth + 1
                        frontier.append(there)
            if self._cached_entries + len(found) > self.MAX_CACHED_ENTRIES:
                self._balls.clear()
                self._cached_entries = 0
            self._balls[key] = found
            self._cached_entries += len(found)
        return found

    def hops(self, a: str, b: str, limit: int) -> int | None:
        """Hops between two elements, or None when they are more than `limit` apart."""
        return self.ball(a, limit).get(b)

    def is_connected(self, elements: Iterable[str]) -> bool:
        """Whether the elements form a connected subgraph (links among themselves only)."""
        members = set(elements)
        if len(members) <= 1:
            return True
        start = next(iter(members))
        seen = {start}
        frontier = [start]
        while frontier:
            here = frontier.pop()
            for there in self.adjacent.get(here, ()):
                if there in members and there not in seen:
                    seen.add(there)
                    frontier.append(there)
        return len(seen) == len(members)


class CauseRules:
    """Cause→effect rules between alarm types, closed transitively (a cycle makes its types causes
    of each other; the room then breaks ties by time)."""

    def __init__(self, pairs: Iterable[tuple[str, str]]) -> None:
        self.direct: dict[str, set[str]] = {}
        for cause, effect in pairs:
            if cause != effect:
                self.direct.setdefault(cause, set()).add(effect)
        self.types = set(self.direct) | {e for effects in self.direct.values() for e in effects}
        self.effects_of: dict[str, frozenset[str]] = {t: frozenset(self._reach(t)) for t in self.types}

    def _reach(self, cause: str) -> set[str]:
        seen: set[str] = set()
        frontier = list(self.direct.get(cause, ()))
        while frontier:
            t = frontier.pop()
            if t not in seen:
                seen.add(t)
                frontier.extend(self.direct.get(t, ()))
        seen.discard(cause)
        return seen

    def __len__(self) -> int:
        return sum(map(len, self.direct.values()))

    def knows(self, alarm_type: str) -> bool:
        return alarm_type in self.types

    def causes(self, cause: str, effect: str) -> bool:
        """True when `cause` is a cause of `effect`, directly or through other types."""
        return effect in self.effects_of.get(cause, ())

    def explains(self, cause: str, types: Iterable[str]) -> bool:
        """True when every type is `cause` itself or one of its effects."""
        effects = self.effects_of.get(cause, frozenset())
        return all(t == cause or t in effects for t in types)

    def direct_effects(self, cause: str, among: Iterable[str]) -> list[str]:
        """Which of `among` the rules name as effects of `cause` (sorted), for the reason text."""
        effects = self.effects_of.get(cause, frozenset())
        return sorted(t for t in set(among) if t in effects)


def load_topology(path: str | Path) -> Topology:
    """A topology file by its suffix: `.csv` (edge list), `.json`, `.graphml` / `.xml`."""
    path = Path(path)
    suffix = path.suffix.lower()
    try:
        if suffix == ".csv":
            return Topology(_csv_pairs(path, ("element_a", "element_b")))
        if suffix == ".json":
            return Topology(_json_edges(json.loads(path.read_text()), path))
        if suffix in (".graphml", ".xml"):
            return Topology(_graphml_edges(path))
    except (OSError, ValueError, ET.ParseError) as exc:
        if isinstance(exc, GraphFileError):
            raise
        raise GraphFileError(f"topology file {path}: {exc}") from None
    raise GraphFileError(f"topology file {path}: unknown suffix {suffix!r} (csv, json or graphml)")


def load_rules(path: str | Path) -> CauseRules:
    """A rules file: CSV `cause_type,effect_type`, one rule per line (a header line is optional)."""
    path = Path(path)
    try:
        return CauseRules(_csv_pairs(path, ("cause_type", "effect_type")))
    except OSError as exc:
        raise GraphFileError(f"rules file {path}: {exc}") from None


def _csv_pairs(path: Path, header: tuple[str, str]) -> list[tuple[str, str]]:
    pairs = []
    first = True  # the header is optional, on the first line that is not a comment
    with path.open(newline="") as handle:
        for number, row in enumerate(csv.reader(handle), 1):
            cells = [c.strip() for c in row]
            if not cells or not any(cells) or cells[0].startswith("#"):
                continue
            if first and tuple(c.lower() for c in cells[:2]) == header:
                first = False
                continue
            first = False
            if len(cells) < 2 or not cells[0] or not cells[1]:
                raise GraphFileError(f"{path} line {number}: expected two names, got {row!r}")
            pairs.append((cells[0], cells[1]))
    return pairs


def _json_edges(data, path: Path) -> list[tuple[str, str]]:
    """[[a, b], ...], {"edges": [...]}, a node-link graph {"links": [{"source", "target"}]}, or an
    adjacency map {"a": ["b", ...]}."""
    if isinstance(data, dict) and isinstance(data.get("links"), list):
        return [(str(e["source"]), str(e["target"])) for e in data["links"]]
    if isinstance(data, dict) and isinstance(data.get("edges"), list):
        data = data["edges"]
    if isinstance(data, list):
        out = []
        for edge in data:
            if isinstance(edge, dict):
                out.append((str(edge["source"]), str(edge["target"])))
            elif isinstance(edge, list | tuple) and len(edge) == 2:
                out.append((str(edge[0]), str(edge[1])))
            else:
                raise GraphFileError(f"topology file {path}: an edge must be [a, b] or {{source, target}}")
        return out
    if isinstance(data, dict):
        return [(str(a), str(b)) for a, bs in data.items() for b in bs]
    raise GraphFileError(f"topology file {path}: expected an edge list, a node-link graph or an adjacency map")


def _graphml_edges(path: Path) -> list[tuple[str, str]]:
    root = ET.parse(path).getroot()
    return [(e.attrib["source"], e.attrib["target"]) for e in root.iter() if e.tag.rsplit("}", 1)[-1] == "edge"]
