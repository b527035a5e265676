"""`telesum bench pack` runs small and reports the agreed JSON keys."""

from __future__ import annotations

import json

from worker.cli import main


def test_bench_pack_small_json_has_figures(capsys) -> None:
    assert main(["bench", "pack", "--sequences", "3000", "--python-sequences", "500", "--json"]) == 0
    r = json.loads(capsys.readouterr().out)
    for key in ("native_seq_per_s", "python_seq_per_s", "fill_ratio", "pad_fraction", "memcpy_gb_per_s",
                "fraction_of_memcpy"):
        assert r[key] > 0, key
    assert 0 < r["fill_ratio"] <= 1 and 0 <= r["pad_fraction"] < 1
