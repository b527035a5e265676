from __future__ import annotations

import json

import pytest

from worker.incidents.graph import CauseRules, GraphFileError, load_rules, load_topology

from tests.incidents.conftest import chain


def test_topology_hops_within_limit_else_none():
    topology = chain("a", "b", "c", "d")
    assert topology.hops("a", "c", 2) == 2 and topology.hops("a", "d", 2) is None
    assert topology.ball("b", 1) == {"b": 0, "a": 1, "c": 1}


def test_topology_ball_cache_dropped_beyond_its_bound_same_answers(monkeypatch):
    topology = chain(*"abcdef")
    monkeypatch.setattr(topology, "MAX_CACHED_ENTRIES", 5)
    first = [topology.ball(e, 2) for e in "abcdef"]
    assert len(topology._balls) < 6 and [topology.ball(e, 2) for e in "abcdef"] == first


def test_topology_is_connected_only_through_members():
    topology = chain("a", "b", "c")
    assert topology.is_connected({"a", "b"}) and not topology.is_connected({"a", "c"})


def test_rules_transitive_causes_and_explains():
    rules = CauseRules([("LOS", "LINK"), ("LINK", "BER")])
    assert rules.causes("LOS", "BER") and not rules.causes("BER", "LOS")
    assert rules.explains("LOS", {"LOS", "LINK", "BER"}) and not rules.explains("LINK", {"LOS", "LINK"})
    assert rules.direct_effects("LOS", ["BER", "X"]) == ["BER"] and len(rules) == 2


def test_load_topology_csv_json_graphml_same_links(tmp_path):
    (tmp_path / "t.csv").write_text("element_a,element_b\na,b\nb,c\n")
    (tmp_path / "t.json").write_text(json.dumps({"links": [{"source": "a", "target": "b"},
                                                           {"source": "b", "target": "c"}]}))
    (tmp_path / "e.json").write_text(json.dumps([["a", "b"], ["b", "c"]]))
    (tmp_path / "t.graphml").write_text(
        '<?xml version="1.0"?><graphml xmlns="http://graphml.graphdrawing.org/xmlns"><graph edgedefault="undirected">'
        '<node id="a"/><node id="b"/><node id="c"/><edge source="a" target="b"/><edge source="b" target="c"/>'
        '</graph></graphml>')
    for name in ("t.csv", "t.json", "e.json", "t.graphml"):
        topology = load_topology(tmp_path / name)
        assert topology.adjacent == {"a": {"b"}, "b": {"a", "c"}, "c": {"b"}}, name


def test_load_rules_csv_header_optional(tmp_path):
    (tmp_path / "r.csv").write_text("cause_type,effect_type\nA1,A2\n")
    (tmp_path / "s.csv").write_text("A1,A2\n# comment\n\nA2,A3\n")
    assert load_rules(tmp_path / "r.csv").causes("A1", "A2")
    assert load_rules(tmp_path / "s.csv").causes("A1", "A3")


def test_load_bad_files_raise_graph_file_error_naming_the_file(tmp_path):
    (tmp_path / "bad.csv").write_text("a,b\nlonely\n")
    with pytest.raises(GraphFileError, match="line 2"):
        load_topology(tmp_path / "bad.csv")
    with pytest.raises(GraphFileError, match="unknown suffix"):
        load_topology(tmp_path / "t.txt")
    with pytest.raises(GraphFileError, match="missing.csv"):
        load_rules(tmp_path / "missing.csv")
    (tmp_path / "bad.json").write_text("{")
    with pytest.raises(GraphFileError, match="bad.json"):
        load_topology(tmp_path / "bad.json")
