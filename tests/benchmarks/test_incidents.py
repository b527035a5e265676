"""`telesum bench incidents --offline` on a tiny hand-made data set of the real one's shape."""

from __future__ import annotations

import json

import numpy as np

from worker.cli import main


def test_bench_incidents_offline_writes_figures_chart_and_command(tmp_path, capsys):
    topology = np.zeros((4, 4), dtype=np.int64)
    for i in range(3):
        topology[i, i + 1] = topology[i + 1, i] = 1
    dag = np.zeros((3, 3), dtype=np.int64)
    dag[0, 1] = dag[1, 2] = 1
    np.save(tmp_path / "Topology.npy", topology)
    np.save(tmp_path / "DAG.npy", dag)
    rows = [(1, 1, 5), (0, 0, 3), (2, 2, 7), (1, 1, 9), (0, 3, 5000), (2, 3, 5001)]
    (tmp_path / "Alarm.csv").write_text("alarm_id,device_id,start_timestamp,end_timestamp\n"
                                        + "".join(f"{a},{d},{t},{t}\n" for a, d, t in rows))
    out = tmp_path / "results" / "incidents.json"
    assert main(["bench", "incidents", "--offline", "--data", str(tmp_path), "--out", str(out)]) == 0
    report = json.loads(out.read_text())
    assert report["command"].startswith("telesum bench incidents --offline") and report["alarms"] == 6
    room = report["results"]["room: topology + rules"]
    assert room["incidents"] == 2 and room["root_cause_precision"] == 1.0 and room["coherence"] == 1.0
    assert room["open_delay_s"]["max"] <= 2.0
    assert report["results"]["per element, 300 s gap"]["incidents"] == 4
    assert report["ves_path_topology_rules"]["alarms_per_s"] > 0
    assert out.with_suffix(".png").stat().st_size > 0
    capsys.readouterr()
    assert main(["bench", "incidents"]) == 2
