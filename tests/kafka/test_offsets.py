"""OffsetTracker: the contiguous acknowledged prefix, per partition, across revocations."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st
from kafka import TopicPartition

from worker.kafka.offsets import OffsetTracker

TP = TopicPartition("t", 0)


def test_tracker_out_of_order_acks_commit_only_contiguous_prefix():
    t = OffsetTracker()
    epoch = t.assign(TP)
    for off in (10, 11, 12, 13):
        t.track(TP, off)
    t.mark_done(TP, 12, epoch)
    assert t.committable() == {}
    t.mark_done(TP, 10, epoch)
    assert t.committable() == {TP: 11}
    t.committed({TP: 11})
    assert t.committable() == {}
    t.mark_done(TP, 11, epoch)
    assert t.committable() == {TP: 13}
    assert t.in_flight(TP) == 1


def test_tracker_offset_gaps_commit_after_last_done():
    t = OffsetTracker()
    epoch = t.assign(TP)
    for off in (3, 7, 9):  # compacted topics and transaction markers leave gaps
        t.track(TP, off)
    for off in (3, 7, 9):
        t.mark_done(TP, off, epoch)
    assert t.committable() == {TP: 10}


def test_tracker_revoked_partition_ignores_stale_acks():
    t = OffsetTracker()
    old = t.assign(TP)
    t.track(TP, 0)
    assert t.revoke(TP) == 1
    new = t.assign(TP)
    assert new != old
    assert t.mark_done(TP, 0, old) is False
    assert t.committable() == {}
    t.track(TP, 0)
    assert t.mark_done(TP, 0, new) is True
    assert t.committable() == {TP: 1}


def test_tracker_offset_going_backwards_raises():
    t = OffsetTracker()
    t.assign(TP)
    t.track(TP, 5)
    with pytest.raises(ValueError, match="offset 5 polled after 5"):
        t.track(TP, 5)


@given(st.lists(st.integers(0, 30), unique=True, min_size=1), st.randoms())
def test_tracker_any_ack_order_commit_is_first_unacked(offsets, rnd):
    offsets = sorted(offsets)
    t = OffsetTracker()
    epoch = t.assign(TP)
    for off in offsets:
        t.track(TP, off)
    acked = rnd.sample(offsets, rnd.randint(0, len(offsets)))
    for off in acked:
        t.mark_done(TP, off, epoch)
    unacked = [o for o in offsets if o not in acked]
    expected = None
    if not unacked:
        expected = offsets[-1] + 1
    elif unacked[0] != offsets[0]:
        expected = max(o for o in offsets if o < unacked[0]) + 1
    assert t.committable().get(TP) == expected


def test_offset_answered_in_parts_is_done_only_after_every_part():
    tracker = OffsetTracker()
    tp = TopicPartition("in", 0)
    epoch = tracker.assign(tp)
    tracker.track(tp, 0, parts=3)  # e.g. a VES eventList of three events
    tracker.track(tp, 1)
    tracker.mark_done(tp, 1, epoch)
    tracker.mark_done(tp, 0, epoch)
    tracker.mark_done(tp, 0, epoch)
    assert tracker.committable() == {}
    tracker.mark_done(tp, 0, epoch)
    assert tracker.committable() == {tp: 2}


def test_track_refuses_an_offset_without_answers():
    tracker = OffsetTracker()
    tp = TopicPartition("in", 0)
    tracker.assign(tp)
    with pytest.raises(ValueError, match="at least one answer"):
        tracker.track(tp, 0, parts=0)
