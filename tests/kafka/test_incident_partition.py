"""One partition's room and its commits, without a broker: what the committed offset and metadata say,
and that a room restored from them lists every input once across both lives."""

from __future__ import annotations

import collections

import pytest
from kafka import TopicPartition

from tests.kafka.incident_helpers import STORM_RULES, STORM_TOPOLOGY
from worker.incidents import Alarm, RoomConfig, load_rules, load_topology
from worker.kafka.incident_outputs import alarm_of
from worker.kafka.incident_partition import InputRef, PartitionRoom, Restore
from worker.samples import iter_generate

TP = TopicPartition("alarms", 0)
CONFIG = RoomConfig(topology=load_topology(STORM_TOPOLOGY), rules=load_rules(STORM_RULES), update_interval_s=5.0)
ALARMS = [alarm_of(record, InputRef("alarms", 0, i), None) for i, (record, _) in enumerate(iter_generate(120, "storm"))]


def _feed(part: PartitionRoom, offsets: range) -> list:
    events = []
    for offset in offsets:
        events += part.feed(offset, [ALARMS[offset]])
    return events


def _ack(part: PartitionRoom, events: list) -> None:
    for event in events:
        part.covered(event.inputs)


def test_partition_room_open_listed_above_a_pending_input_metadata_marks_it():
    marked = 0
    for n in range(20, 120):  # every cut of the storm: the open of an unrelated alarm passes a pending update
        part = PartitionRoom(TP, CONFIG)
        events = _feed(part, range(n))
        _ack(part, events)
        offset, metadata = part.position()
        restore = Restore.from_metadata(metadata)
        pending = sorted(ref.offset for ref in part.room.uncovered_inputs())
        assert offset == 0  # the storm's incident is open: its first alarm holds the commit
        assert restore.covered_through == (pending[0] if pending else n)
        above = {ref.offset for e in events for ref in e.inputs if ref.offset >= restore.covered_through}
        if above:
            marked += 1
            assert restore.listed, n
    assert marked


@pytest.mark.parametrize("cut", range(20, 120, 9))
def test_partition_room_restored_from_its_commit_lists_every_input_once(cut):
    first = PartitionRoom(TP, CONFIG)
    sent = _feed(first, range(cut))
    _ack(first, sent)
    offset, metadata = first.position()
    second = PartitionRoom(TP, CONFIG, Restore.from_metadata(metadata))  # a SIGKILL: its state is gone
    sent += _feed(second, range(offset, 120)) + second.close()
    counts = collections.Counter(ref.offset for event in sent for ref in event.inputs)
    assert sorted(counts) == list(range(120))
    assert [o for o, n in counts.items() if n > 1] == []


def test_partition_room_transaction_listing_counts_as_covered():
    part = PartitionRoom(TP, CONFIG)
    events = _feed(part, range(30))
    in_transaction = {ref for e in events for ref in e.inputs}
    _, before = part.position()
    _, during = part.position(in_transaction)
    assert Restore.from_metadata(during).covered_through >= Restore.from_metadata(before).covered_through
    assert Restore.from_metadata(before).covered_through == 0  # nothing acknowledged yet


def test_restore_from_metadata_not_ours_is_none():
    assert Restore.from_metadata("") is None
    assert Restore.from_metadata("some other tool's note") is None


def test_partition_room_wall_clock_tick_before_a_restart_decides_otherwise_yet_lists_each_input_once(monkeypatch):
    """A wall-clock tick resolves Y before an alarm of Y's key arrives with an older event time: the first
    life opens Z for it; the restored room, which never ticks while rebuilding, folds it into Y. The
    events differ (Z is never resolved in the second life), the inputs are still listed once."""
    import worker.kafka.incident_partition as partition

    wall = [0.0]
    monkeypatch.setattr(partition, "wall_clock", lambda: wall[0])
    config = RoomConfig(idle_s=60.0, update_interval_s=1.0)
    alarm = lambda i, element, t: Alarm(element, "A1", t, input=InputRef("alarms", 0, i))  # noqa: E731
    stream = [alarm(0, "dev-1", 1000.0), alarm(1, "dev-2", 1001.0), alarm(2, "dev-1", 1050.0),
              alarm(3, "dev-2", 1055.0)]
    first, sent = PartitionRoom(TP, config), []
    for i, a in enumerate(stream[:3]):
        sent += first.feed(i, [a])
    wall[0] = 15.0  # a quiet quarter minute: the clock reaches 1065, Y (dev-2, idle since 1001) resolves
    sent += first.tick()
    sent += first.feed(3, [stream[3]])  # dev-2 again at 1055: behind the clock, placed at once, a new incident
    _ack(first, sent)
    assert [e.event for e in sent if e.inputs and e.inputs[0].offset == 3] == ["open"]
    offset, metadata = first.position()
    second = PartitionRoom(TP, config, Restore.from_metadata(metadata))
    again = []
    for i in range(offset, 4):
        again += second.feed(i, [stream[i]])
    again += second.close()
    firsts = {e.incident_id for e in sent if e.event == "open"}
    assert {e.incident_id for e in again} < firsts  # the second life never names the first life's Z
    counts = collections.Counter(ref.offset for event in sent + again for ref in event.inputs)
    assert counts == {0: 1, 1: 1, 2: 1, 3: 1}


def _tick_then_late_alarm(part: PartitionRoom, wall: list[float]) -> tuple[list, list[Alarm]]:
    """The stream of the test above through `part`: three alarms, a quiet quarter minute (the clock passes
    Y's idle timeout), then an alarm of Y's key behind the ticked clock. Its events and the alarms."""
    alarm = lambda i, element, t: Alarm(element, "A1", t, input=InputRef("alarms", 0, i))  # noqa: E731
    stream = [alarm(0, "dev-1", 1000.0), alarm(1, "dev-2", 1001.0), alarm(2, "dev-1", 1050.0),
              alarm(3, "dev-2", 1055.0)]
    sent = []
    for i, a in enumerate(stream[:3]):
        sent += part.feed(i, [a])
    wall[0] = 15.0
    sent += part.tick()
    sent += part.feed(3, [stream[3]])
    return sent, stream


def test_partition_room_state_snapshot_after_a_wall_clock_tick_goes_on_with_the_same_incidents(monkeypatch):
    """The case above with a state topic: the restored room is the first life's, so the second life
    resolves Z and never resolves Y again, where the recomputed one did both the other way round."""
    import worker.kafka.incident_partition as partition
    from worker.incidents.snapshot import restore, snapshot

    wall = [0.0]
    monkeypatch.setattr(partition, "wall_clock", lambda: wall[0])
    config = RoomConfig(idle_s=60.0, update_interval_s=1.0)
    first = PartitionRoom(TP, config, snapshots=True)
    sent, _ = _tick_then_late_alarm(first, wall)
    _ack(first, sent)
    offset, metadata = first.position()
    assert offset == 4 and Restore.is_snapshot(metadata) and Restore.from_metadata(metadata) is None
    second = PartitionRoom(TP, config, snapshots=True, room=restore(config, snapshot(first.room)))
    again = second.close()
    opened = {e.incident_id for e in sent if e.event == "open"}
    resolved_first = {e.incident_id for e in sent if e.event == "resolve"}
    z = next(e.incident_id for e in sent if e.event == "open" and e.inputs[0].offset == 3)
    assert z in {e.incident_id for e in again if e.event == "resolve"}  # the second life resolves Z
    assert not resolved_first & {e.incident_id for e in again}       # and never Y (resolved before) again
    assert {e.incident_id for e in sent + again if e.event == "resolve"} == opened
    assert collections.Counter(ref.offset for e in sent + again for ref in e.inputs) == {0: 1, 1: 1, 2: 1, 3: 1}


@pytest.mark.parametrize("cut", range(20, 120, 9))
def test_partition_room_switched_to_a_state_topic_after_a_commit_without_one_lists_every_input_once(cut):
    first = PartitionRoom(TP, CONFIG)
    sent = _feed(first, range(cut))
    _ack(first, sent)
    offset, metadata = first.position()
    second = PartitionRoom(TP, CONFIG, Restore.from_metadata(metadata), snapshots=True)
    restored_through = Restore.from_metadata(metadata).covered_through
    for i in range(offset, 120):
        sent += second.feed(i, [ALARMS[i]])
        assert (second.position() is None) == (i + 1 < restored_through)  # no snapshot commit while rebuilding
    sent += second.close()
    counts = collections.Counter(ref.offset for event in sent for ref in event.inputs)
    assert sorted(counts) == list(range(120)) and [o for o, n in counts.items() if n > 1] == []
    assert second.position() == (120, '{"snapshot":true}')


def test_restore_is_snapshot_only_for_a_state_topic_commit():
    assert Restore.is_snapshot('{"snapshot":true}')
    assert not Restore.is_snapshot('{"covered_through":3}') and not Restore.is_snapshot(None)
    assert not Restore.is_snapshot("not json") and not Restore.is_snapshot("[1]")
