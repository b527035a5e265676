"""The cause learner: which pairs it keeps, how it orients them, its bounds and its state."""

from __future__ import annotations

import random

from tests.incidents.learn_history import SITES, history, ring
from worker.incidents import Alarm
from worker.incidents.graph import load_rules
from worker.incidents.learn import CauseLearner, read_evidence, write_rules


def learned(alarms: list[Alarm], topology=None, **kwargs) -> CauseLearner:
    learner = CauseLearner(topology, **kwargs)
    for a in alarms:
        learner.observe(a.element, a.alarm_type, a.time)
    learner.flush()
    return learner


def test_learner_orients_by_what_the_effect_needs_not_by_who_came_first():
    alarms = history(link_first=0.7)
    edges = {(e.cause, e.effect): e for e in learned(alarms, ring()).edges()}
    assert set(edges) == {("POWER", "LINK_DOWN")}
    edge = edges[("POWER", "LINK_DOWN")]
    assert edge.cause_with_effect > 0.9 > edge.effect_with_cause  # links need power; power fails alone too
    assert edge.chance <= 2 and edge.lift >= 2 and edge.z >= 5
    assert "POWER near" in edge.evidence() and f"{edge.cooccurrences} co-occurrences" in edge.evidence()


def test_learner_keeps_no_pair_that_chance_explains():
    rng = random.Random(3)
    busy = sorted((Alarm(rng.choice(SITES[:3]), rng.choice(("TEMP_HIGH", "FAN_SPEED")), rng.uniform(0, 86400.0))
                   for _ in range(3000)), key=lambda a: a.time)
    learner = learned(busy, ring())
    assert learner.near[("TEMP_HIGH", "FAN_SPEED")] > 50  # they do meet, often
    assert learner.edges() == []                           # as often as an hour earlier


def test_learner_without_topology_counts_the_same_element_only():
    alarms = history()
    assert learned(alarms, None).edges() == []  # the links are down on the neighbours, not the power site
    same_site = [Alarm("site-00" if a.alarm_type != "TEMP_HIGH" else a.element, a.alarm_type, a.time) for a in alarms]
    assert [(e.cause, e.effect) for e in learned(same_site, None).edges()] == [("POWER", "LINK_DOWN")]


def test_learner_memory_stays_bounded_on_a_long_busy_stream():
    rng = random.Random(5)
    learner = CauseLearner(None, max_recent=16, max_pairs=500)
    t = 0.0
    for _ in range(30_000):
        t += rng.expovariate(2.0)
        learner.observe(f"ne-{rng.randrange(2000)}", f"T{rng.randrange(60)}", t)
        assert len(learner._waiting) <= 400  # a minute of alarms at 2 a second, with room for bursts
        assert len(learner.near) + len(learner.chance) <= 500  # unbounded, 60 types make up to 7,080
    assert all(len(times) <= 16 for times, _ in learner._recent.values())
    horizon = t - learner.shift_s - 2 * learner.lag_s
    assert sum(1 for times, _ in learner._recent.values() if times and times[-1] < horizon) < 2000


def test_learner_state_goes_on_as_if_never_stopped():
    alarms = history()
    whole = learned(alarms, ring())
    first = CauseLearner(ring())
    for a in alarms[:len(alarms) // 2]:
        first.observe(a.element, a.alarm_type, a.time)
    again = CauseLearner(ring())
    again.load(first.state())
    for a in alarms[len(alarms) // 2:]:
        again.observe(a.element, a.alarm_type, a.time)
    again.flush()
    assert again.edges() == whole.edges() and again.near == whole.near and again.chance == whole.chance


def test_learned_rules_file_reads_back_as_the_same_rules(tmp_path):
    learner = learned(history(), ring())
    path = tmp_path / "rules.csv"
    write_rules(path, learner.edges())
    assert load_rules(path).direct == learner.rules().direct == {"POWER": {"LINK_DOWN"}}
    (edge,) = learner.edges()
    kept = read_evidence(path)[("POWER", "LINK_DOWN")]
    assert kept.evidence() == edge.evidence() and kept.cooccurrences == edge.cooccurrences
    odd = [e.__class__("Loss of signal, port 1", 'say "hi"', *[getattr(e, f) for f in e.__slots__[2:]])
           for e in learner.edges()]
    write_rules(path, odd)
    assert load_rules(path).direct == {"Loss of signal, port 1": {'say "hi"'}}


def test_learned_edges_extend_the_operators_rules_but_never_turn_one_round():
    from worker.incidents.graph import CauseRules
    from worker.incidents.learn import LearnedEdge, LearnedGraph

    def edge(cause, effect):
        return LearnedEdge(cause, effect, 0.9, 0.5, 40, 2, 20.0, 27.0)

    graph = LearnedGraph(CauseRules([("LOS", "LINK")]), [edge("LINK", "LOS"), edge("PWR", "LOS")])
    assert graph.rules.direct == {"LOS": {"LINK"}, "PWR": {"LOS"}}
    assert graph.evidence("PWR", "LOS").cooccurrences == 40 and graph.evidence("LOS", "LINK") is None
