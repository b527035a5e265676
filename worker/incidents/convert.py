"""Write an alarm data set's `.npy` matrices as the topology and rules CSV files the settings name:

    python -m worker.incidents.convert shared/data/alarms/25V_474N_Microwave --out /tmp/microwave

`Topology.npy` (n × n, 1 where devices i and j are linked) becomes `topology.csv`
(`element_a,element_b`, devices named `dev-<i>`, each link once); `DAG.npy` (1 where alarm type i
causes type j) becomes `rules.csv` (`cause_type,effect_type`, types named `A<i>`).
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

import numpy as np


def element_name(device_id: int) -> str:
    return f"dev-{device_id}"


def type_name(alarm_id: int) -> str:
    return f"A{alarm_id}"


def topology_pairs(matrix: np.ndarray) -> list[tuple[str, str]]:
    """Links of a 0/1 adjacency matrix, each once (i < j; a one-sided entry counts as a link)."""
    linked = (matrix != 0) | (matrix.T != 0)
    rows, cols = np.nonzero(np.triu(linked, k=1))
    return [(element_name(int(i)), element_name(int(j))) for i, j in zip(rows, cols)]


def rule_pairs(matrix: np.ndarray) -> list[tuple[str, str]]:
    rows, cols = np.nonzero(matrix)
    return [(type_name(int(i)), type_name(int(j))) for i, j in zip(rows, cols) if i != j]


def write_csv(path: Path, header: tuple[str, str], pairs: list[tuple[str, str]]) -> None:
    path.write_text(",".join(header) + "\n" + "".join(f"{a},{b}\n" for a, b in pairs))


def convert(folder: Path, out: Path) -> tuple[Path, Path]:
    """`folder`/Topology.npy and DAG.npy -> `out`/topology.csv and rules.csv."""
    out.mkdir(parents=True, exist_ok=True)
    topology, rules = out / "topology.csv", out / "rules.csv"
    write_csv(topology, ("element_a", "element_b"), topology_pairs(np.load(folder / "Topology.npy")))
    write_csv(rules, ("cause_type", "effect_type"), rule_pairs(np.load(folder / "DAG.npy")))
    return topology, rules


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("folder", type=Path, help="a data set folder holding Topology.npy and DAG.npy")
    parser.add_argument("--out", type=Path, default=Path("."), help="where to write topology.csv and rules.csv")
    args = parser.parse_args(argv)
    for path in convert(args.folder, args.out):
        print(path)
    return 0


if __name__ == "__main__":
    sys.exit(main())
