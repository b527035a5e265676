from __future__ import annotations

import pytest

from worker.incidents import RoomConfig
from worker.settings.fields import SettingsError
from worker.settings.load import from_values, load_settings


def test_config_from_settings_loads_topology_and_rules_files(tmp_path):
    (tmp_path / "t.csv").write_text("element_a,element_b\na,b\n")
    (tmp_path / "r.csv").write_text("cause_type,effect_type\nLOS,LINK\n")
    env = {"TELESUM_INCIDENT_TOPIC": "incidents", "TELESUM_INCIDENT_TOPOLOGY": str(tmp_path / "t.csv"),
           "TELESUM_INCIDENT_RULES": str(tmp_path / "r.csv"), "TELESUM_INCIDENT_MAX_HOPS": "3",
           "TELESUM_INCIDENT_ONLY": "true"}
    settings = load_settings(None, env).settings.incidents
    assert settings.enabled and settings.only and settings.max_hops == 3
    config = RoomConfig.from_settings(settings)
    assert config.grouping == "rules+topology" and config.max_hops == 3 and config.rules.causes("LOS", "LINK")


def test_config_defaults_leave_incidents_off():
    settings = from_values({}).settings.incidents
    assert not settings.enabled and RoomConfig.from_settings(settings).grouping == "element+time"


def test_config_spread_below_link_bound_refused():
    with pytest.raises(SettingsError, match="max_hops"):
        from_values({"incidents.link_hops": 3, "incidents.max_hops": 2})
    with pytest.raises(ValueError, match="max_hops"):
        RoomConfig(link_hops=3, max_hops=2)


def test_config_learned_file_starts_the_room_and_live_learning_adds_to_it(tmp_path):
    from worker.incidents import IncidentRoom

    (tmp_path / "t.csv").write_text("element_a,element_b\na,b\n")
    (tmp_path / "learned.csv").write_text("# learned by telesum incidents learn\ncause_type,effect_type\nPWR,LOS\n")
    env = {"TELESUM_INCIDENT_TOPIC": "incidents", "TELESUM_INCIDENT_TOPOLOGY": str(tmp_path / "t.csv"),
           "TELESUM_INCIDENT_LEARNED_RULES": str(tmp_path / "learned.csv")}
    config = RoomConfig.from_settings(load_settings(None, env).settings.incidents)
    room = IncidentRoom(config)
    assert config.learns and room.rules.causes("PWR", "LOS") and room.grouping_name == "learned+topology"
    assert not room.rules.knows("cause_type")  # the header after a comment is still a header


def test_config_operator_rules_win_unless_extended(tmp_path):
    from worker.incidents import IncidentRoom

    (tmp_path / "r.csv").write_text("cause_type,effect_type\nLOS,LINK\n")
    base = {"TELESUM_INCIDENT_TOPIC": "incidents", "TELESUM_INCIDENT_RULES": str(tmp_path / "r.csv")}
    plain = IncidentRoom(RoomConfig.from_settings(load_settings(None, base).settings.incidents))
    assert plain.learner is None and plain.rules.direct == {"LOS": {"LINK"}}
    extended = IncidentRoom(RoomConfig.from_settings(
        load_settings(None, {**base, "TELESUM_INCIDENT_EXTEND_RULES": "true"}).settings.incidents))
    assert extended.learner is not None and extended.rules.direct == {"LOS": {"LINK"}}
    assert extended.grouping_name == "rules"  # the operator's rules stay the grouping's name


def test_config_learned_file_evidence_reaches_the_root_cause_reason(tmp_path):
    from tests.incidents.conftest import play
    from worker.incidents import Alarm, IncidentRoom
    from worker.incidents.learn import LearnedEdge, write_rules

    path = tmp_path / "learned.csv"
    write_rules(path, [LearnedEdge("PWR", "LOS", 0.9, 0.4, 120, 3, 40.0, 60.0)])
    with path.open("a") as handle:
        handle.write("FAN,TEMP\n")  # an operator's own line: no evidence
    (tmp_path / "t.csv").write_text("a,b\n")
    env = {"TELESUM_INCIDENT_TOPIC": "incidents", "TELESUM_INCIDENT_TOPOLOGY": str(tmp_path / "t.csv"),
           "TELESUM_INCIDENT_LEARNED_RULES": str(path), "TELESUM_INCIDENT_LEARN_CAUSES": "false"}
    room = IncidentRoom(RoomConfig.from_settings(load_settings(None, env).settings.incidents))
    events = play(room, [Alarm("b", "LOS", 0.0), Alarm("a", "PWR", 2.0), Alarm("a", "FAN", 9000.0),
                         Alarm("b", "TEMP", 9001.0)])
    reasons = {e.root_cause.alarm_type: e.root_cause.reason for e in events if e.event == "resolve"}
    assert reasons["PWR"].startswith("learned: PWR → LOS (PWR near 90% of LOS, LOS near 40% of PWR; 120 co-occurrences)")
    assert reasons["FAN"].startswith("learned: FAN causes TEMP")
