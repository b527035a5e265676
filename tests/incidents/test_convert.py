from __future__ import annotations

import numpy as np

from worker.incidents.convert import convert, main
from worker.incidents.graph import load_rules, load_topology


def test_convert_npy_matrices_to_csv_files_the_loaders_read(tmp_path, capsys):
    topology = np.zeros((3, 3), dtype=np.int64)
    topology[0, 1] = topology[1, 0] = topology[1, 2] = topology[2, 1] = 1
    dag = np.zeros((3, 3), dtype=np.int64)
    dag[2, 0] = dag[0, 1] = 1
    np.save(tmp_path / "Topology.npy", topology)
    np.save(tmp_path / "DAG.npy", dag)
    assert main([str(tmp_path), "--out", str(tmp_path / "out")]) == 0
    assert (tmp_path / "out" / "topology.csv").read_text() == "element_a,element_b\ndev-0,dev-1\ndev-1,dev-2\n"
    assert load_topology(tmp_path / "out" / "topology.csv").hops("dev-0", "dev-2", 2) == 2
    rules = load_rules(tmp_path / "out" / "rules.csv")
    assert rules.causes("A2", "A1") and not rules.causes("A1", "A2")
    assert "rules.csv" in capsys.readouterr().out
    assert convert(tmp_path, tmp_path / "again")[0].name == "topology.csv"
