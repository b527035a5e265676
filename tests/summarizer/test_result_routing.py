"""Results per caller on a tiny random model: a request submitted with a caller comes back only from
`poll(..., caller=)`, the others only from `poll` without one, whichever thread pumps the engine's queue."""

from __future__ import annotations

import threading

import pytest

from worker.kafka.incident_followups import FOLLOW_UPS, FollowUps
from worker.messages import IncidentEvent, RootCause, Summary
from worker.prompts import answer_opening
from worker.summarizer.result_collector import ResultCollector

from tests.summarizer.test_summarizer import _record, _summarizer, loaded  # noqa: F401 - the tiny model fixture


def _drain(summarizer, want: int, caller=None, rounds: int = 2000) -> list:
    out = []
    for _ in range(rounds):
        out += summarizer.poll(0.05, caller=caller)
        if len(out) >= want:
            break
    return out


def test_a_callers_results_never_reach_the_default_poll_nor_the_other_way(loaded):  # noqa: F811
    s = _summarizer(loaded)
    try:
        for i in range(4):
            s.submit(("alarm", i), _record(i))
        for i in range(3):
            s.submit((FOLLOW_UPS, i), _record(10 + i), caller=FOLLOW_UPS)
        default = _drain(s, 4)
        follow = _drain(s, 3, caller=FOLLOW_UPS)
        assert sorted(rid for rid, _ in default) == [("alarm", i) for i in range(4)]
        assert sorted(rid for rid, _ in follow) == [(FOLLOW_UPS, i) for i in range(3)]
        assert all(isinstance(r, Summary) for _, r in default + follow)
        assert s.poll(0.0) == [] and s.poll(0.0, caller=FOLLOW_UPS) == []
    finally:
        s.close()


def test_two_threads_polling_each_get_only_their_own(loaded):  # noqa: F811
    s = _summarizer(loaded)
    got: dict = {None: [], FOLLOW_UPS: []}

    def poller(caller, want):
        got[caller] += _drain(s, want, caller=caller)

    try:
        threads = [threading.Thread(target=poller, args=(None, 6)),
                   threading.Thread(target=poller, args=(FOLLOW_UPS, 6))]
        for t in threads:
            t.start()
        for i in range(6):
            s.submit(("alarm", i), _record(i))
            s.submit((FOLLOW_UPS, i), _record(20 + i), caller=FOLLOW_UPS)
        for t in threads:
            t.join(120)
        assert sorted(rid for rid, _ in got[None]) == [("alarm", i) for i in range(6)]
        assert sorted(rid for rid, _ in got[FOLLOW_UPS]) == [(FOLLOW_UPS, i) for i in range(6)]
    finally:
        s.close()


def test_a_submit_that_raises_leaves_no_route(loaded):  # noqa: F811
    s = _summarizer(loaded)
    try:
        s.max_pending_records = 0
        with pytest.raises(Exception):
            s.submit((FOLLOW_UPS, 0), _record(0), caller=FOLLOW_UPS)
        assert s.results._routes == {}
    finally:
        s.close()


def test_follow_ups_through_a_real_summarizer(loaded):  # noqa: F811
    """The incident's record through the tiny model: the result comes back on the follow-ups' channel."""
    s = _summarizer(loaded)
    follow_ups = FollowUps(s, max_in_flight=2, opening=answer_opening)
    event = IncidentEvent(event="open", incident_id="inc-1", sequence=1, time="2026-12-02T03:14:03Z",
                          root_cause=RootCause("dev-1", "A1", "2026-12-02T03:14:02Z", "earliest"),
                          summary="dev-1: A1 with A2 on 2 elements, 3 alarms since 03:14 UTC; root cause A1 on dev-1",
                          grouping="topology", elements=["dev-1", "dev-2"], counts={"A1": 1, "A2": 2}, alarms=3,
                          active=3, first_time="2026-12-02T03:14:02Z", last_time="2026-12-02T03:14:03Z")
    try:
        assert follow_ups.request(None, event)
        for _ in range(2000):
            taken = follow_ups.take()
            if follow_ups.in_flight == 0:
                break
            assert s.poll(0.01) == []  # the default channel never sees it
        assert follow_ups.stats.requested == 1
        assert follow_ups.stats.written + follow_ups.stats.empty == 1 and follow_ups.stats.failed == 0
        # the model's words only: not the grounded opening, which begins with the element
        assert len(taken) == follow_ups.stats.written
        assert all(text.strip() and not text.startswith("dev-1") for _, _, text in taken)
    finally:
        s.close()


def test_collector_push_without_a_route_goes_to_the_default_box():
    import queue

    collector = ResultCollector(queue.Queue(), model="m", decode=lambda ids: "", level_done=lambda req: None)
    collector.route("x", "other")
    collector.push("x", ValueError("x"))
    collector.push("y", ValueError("y"))
    assert [rid for rid, _ in collector.poll(0.0)] == ["y"]
    assert [rid for rid, _ in collector.poll(0.0, "other")] == ["x"]
