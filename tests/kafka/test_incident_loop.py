"""The incident loop against a real broker: storms become incidents with their root cause, and every
alarm is listed in exactly one incident's events for a read_committed consumer, through a rebalance
and through a SIGKILL of `telesum worker`."""

from __future__ import annotations

import collections
import threading
import time
import uuid

import msgspec
import pytest

from tests.kafka.helpers import WorkerProcess, worker_settings
from tests.kafka.incident_helpers import STORM_RULES, STORM_TOPOLOGY, all_listed, listed, produce_storm, read_events
from worker.incidents import RoomConfig
from worker.kafka.incident_loop import IncidentLoop, incident_kafka_settings
from worker.settings.incidents import IncidentSettings

pytestmark = pytest.mark.kafka

# Updates every second of event time (the default 10 s would make each test wait that long for the last ones).
UPDATE_S = "1"


@pytest.fixture
def topics(make_topic):
    def make(partitions: int = 2):
        return make_topic("alarms", partitions), make_topic("out"), make_topic("dlq"), make_topic("incidents", 2)
    return make


@pytest.fixture
def run_loop(kafka_bootstrap):
    """Factory: an in-process IncidentLoop serving in a thread; stopped (drained) at the end."""
    running: list[tuple[threading.Thread, threading.Event, IncidentLoop]] = []

    def stop_all() -> None:
        for thread, stop, _ in running:
            stop.set()
            thread.join(30)
        running.clear()

    def start(inp, out, dlq, incidents, group, guarantee="exactly-once", worker_id="w0", only=False,
              state_topic=None) -> IncidentLoop:
        kafka = worker_settings(kafka_bootstrap, inp, out, dlq, processing_guarantee=guarantee, worker_id=worker_id)
        kafka = msgspec.structs.replace(kafka, group_id=group)
        settings = IncidentSettings(topic=incidents, topology=STORM_TOPOLOGY, rules=STORM_RULES,
                                    update_interval_s=float(UPDATE_S), only=only, state_topic=state_topic)
        loop = IncidentLoop(incident_kafka_settings(kafka, settings), settings, RoomConfig.from_settings(settings))
        stop = threading.Event()
        thread = threading.Thread(target=loop.run, args=(stop,), daemon=True)
        thread.start()
        running.append((thread, stop, loop))
        return loop

    start.stop_all = stop_all
    yield start
    stop_all()


def test_incident_loop_storm_keyed_by_site_one_incident_rooted_at_the_faulty_element(kafka_bootstrap, topics, run_loop):
    inp, out, dlq, incidents = topics(2)
    produce_storm(kafka_bootstrap, inp, 200)
    run_loop(inp, out, dlq, incidents, f"g-{uuid.uuid4().hex}")
    events = read_events(kafka_bootstrap, incidents, all_listed(200))
    assert set(listed(events).values()) == {1} and len(listed(events)) == 200
    last = {e["incident_id"]: e for e in events}
    storm = max(last.values(), key=lambda e: e["alarms"])
    assert storm["root_cause"]["element"] == "dev-1" and storm["root_cause"]["alarm_type"] == "A1"
    assert storm["alarms"] >= 180 and storm["grouping"] == "rules+topology"
    assert "root cause A1 on dev-1" in storm["summary"]
    assert all(e["_key"] == e["incident_id"] for e in events)
    opens = [e for e in events if e["event"] == "open"]
    assert {e["root_cause"]["alarm_type"] for e in opens} == {"A1", "A4"}  # the storm and the unrelated alarms


@pytest.mark.parametrize("state", [False, True], ids=["recomputed", "state-topic"])
def test_incident_loop_rebalance_to_a_second_member_every_alarm_listed_once(kafka_bootstrap, topics, run_loop,
                                                                           make_topic, state):
    inp, out, dlq, incidents = topics(4)
    group, state_topic = f"g-{uuid.uuid4().hex}", make_topic("state") if state else "none"
    produce_storm(kafka_bootstrap, inp, 300, key_by="element")
    run_loop(inp, out, dlq, incidents, group, worker_id="w0", state_topic=state_topic)
    read_events(kafka_bootstrap, incidents, lambda e: len(listed(e)) >= 60)
    second = run_loop(inp, out, dlq, incidents, group, worker_id="w1", state_topic=state_topic)  # mid-stream
    produce_storm(kafka_bootstrap, inp, 300, key_by="element")  # the same records again: 600 inputs
    events = read_events(kafka_bootstrap, incidents, all_listed(600), wait_s=90)
    counts = listed(events)
    assert len(counts) == 600, f"{600 - len(counts)} inputs in no incident"
    assert [k for k, n in counts.items() if n > 1] == []
    # The second member took partitions over: it rebuilt (recomputing) or restored (state topic) their rooms.
    assert second.parts and (second.counts.consumed or second.counts.events)


def test_incident_loop_at_least_once_commits_no_further_than_an_open_incident(kafka_bootstrap, topics, run_loop):
    from tests.kafka.helpers import committed_offset
    from kafka import TopicPartition

    inp, out, dlq, incidents = topics(1)
    group = f"g-{uuid.uuid4().hex}"
    produce_storm(kafka_bootstrap, inp, 50)
    run_loop(inp, out, dlq, incidents, group, guarantee="at-least-once")
    read_events(kafka_bootstrap, incidents, all_listed(50))
    time.sleep(1.0)  # a commit round after the last acknowledgement
    # The storm's incident stays open (idle_s is an hour of event time): its first alarm holds the offset.
    assert committed_offset(kafka_bootstrap, f"{group}-incidents", TopicPartition(inp, 0)) == 0


def test_incident_loop_alone_invalid_input_gets_its_dead_letter_and_is_committed_past(kafka_bootstrap, topics,
                                                                                       run_loop):
    from kafka import TopicPartition

    from tests.kafka.helpers import committed_offset, consume, produce

    inp, out, dlq, incidents = topics(1)
    group = f"g-{uuid.uuid4().hex}"
    produce(kafka_bootstrap, inp, [b"{not json", b'{"event": {"commonEventHeader": 7}}'])
    produce_storm(kafka_bootstrap, inp, 5)
    run_loop(inp, out, dlq, incidents, group, only=True, state_topic="none")
    letters = consume(kafka_bootstrap, [dlq], lambda g: len(g) >= 2)
    events = read_events(kafka_bootstrap, incidents, all_listed(5))
    assert sorted(int(dict(r.headers)["telesum-source-offset"]) for r in letters) == [0, 1]
    assert sorted(o for _, o, _ in listed(events)) == [2, 3, 4, 5, 6]
    time.sleep(1.0)
    assert committed_offset(kafka_bootstrap, group, TopicPartition(inp, 0)) == 2  # the open storm holds offset 2


def test_incident_loop_state_topic_commits_past_open_incidents_and_a_restart_goes_on(kafka_bootstrap, topics,
                                                                                     run_loop, make_topic):
    from kafka import TopicPartition

    from tests.kafka.helpers import committed_offset

    inp, out, dlq, incidents = topics(1)
    state, group = make_topic("state"), f"g-{uuid.uuid4().hex}"
    produce_storm(kafka_bootstrap, inp, 120)
    run_loop(inp, out, dlq, incidents, group, state_topic=state)
    read_events(kafka_bootstrap, incidents, all_listed(120))
    run_loop.stop_all()
    # The storm's incident is still open, yet every input is committed: the room is on the state topic.
    assert committed_offset(kafka_bootstrap, f"{group}-incidents", TopicPartition(inp, 0)) == 120
    run_loop(inp, out, dlq, incidents, group, state_topic=state, worker_id="w1")
    produce_storm(kafka_bootstrap, inp, 120)  # the same storm again: repeats of the restored incident's alarms
    events = read_events(kafka_bootstrap, incidents, all_listed(240))
    assert len(listed(events)) == 240 and set(listed(events).values()) == {1}
    storm = [e for e in events if e["root_cause"]["element"] == "dev-1"]
    assert len({e["incident_id"] for e in storm}) == 1  # the restored room went on with the same incident
    assert [e["sequence"] for e in storm] == sorted({e["sequence"] for e in storm})  # no sequence sent twice


def test_incident_loop_default_state_topic_after_commits_without_one_lists_every_input_once(kafka_bootstrap, topics,
                                                                                           run_loop):
    from kafka import TopicPartition
    from kafka.admin import KafkaAdminClient

    from tests.kafka.helpers import committed_offset

    inp, out, dlq, incidents = topics(1)
    group = f"g-{uuid.uuid4().hex}"
    produce_storm(kafka_bootstrap, inp, 120)
    run_loop(inp, out, dlq, incidents, group, state_topic="none")  # recomputing: the open storm holds the offset
    read_events(kafka_bootstrap, incidents, all_listed(120))
    time.sleep(1.0)  # a commit round after the last acknowledgement
    run_loop.stop_all()
    assert committed_offset(kafka_bootstrap, f"{group}-incidents", TopicPartition(inp, 0)) == 0
    second = run_loop(inp, out, dlq, incidents, group, worker_id="w1")  # the default: a state topic
    produce_storm(kafka_bootstrap, inp, 120)
    events = read_events(kafka_bootstrap, incidents, all_listed(240))
    time.sleep(1.0)
    assert len(listed(events)) == 240 and set(listed(events).values()) == {1}
    assert second.state_topic == f"{group}-incidents-state"
    admin = KafkaAdminClient(bootstrap_servers=kafka_bootstrap)
    try:
        assert second.state_topic in admin.list_topics()
    finally:
        admin.close()
    # Rebuilt from the commit without a state topic, then every input committed with the snapshot.
    assert committed_offset(kafka_bootstrap, f"{group}-incidents", TopicPartition(inp, 0)) == 240


@pytest.mark.parametrize("state", [False, True], ids=["recomputed", "state-topic"])
def test_worker_sigkill_incident_only_every_alarm_in_exactly_one_incident(kafka_bootstrap, topics, tokenizer_dir,
                                                                         tmp_path, monkeypatch, make_topic, state):
    inp, out, dlq, incidents = topics(3)
    group = f"g-{uuid.uuid4().hex}"
    extra = {"worker-id": "w0", "processing-guarantee": "exactly-once", "incident-topic": incidents,
             "incident-topology": STORM_TOPOLOGY, "incident-rules": STORM_RULES,
             "incident-update-interval-s": UPDATE_S, "incident-state-topic": make_topic("state") if state else "none"}
    monkeypatch.setenv("TELESUM_INCIDENT_ONLY", "true")  # a switch: no value on the command line
    produce_storm(kafka_bootstrap, inp, 400, key_by="element")
    worker = WorkerProcess(kafka_bootstrap, inp, out, dlq, group, tokenizer_dir, tmp_path / "w0.log", **extra)
    try:
        read_events(kafka_bootstrap, incidents, lambda e: len(listed(e)) >= 100)
        worker.kill()  # mid-stream: open incidents, events in an open transaction
        produce_storm(kafka_bootstrap, inp, 400, key_by="element")
        worker = WorkerProcess(kafka_bootstrap, inp, out, dlq, group, tokenizer_dir, tmp_path / "w1.log", **extra)
        events = read_events(kafka_bootstrap, incidents, all_listed(800), wait_s=90)
        counts = listed(events)
        assert len(counts) == 800, f"{800 - len(counts)} inputs in no incident\n{worker.log()[-3000:]}"
        assert [k for k, n in counts.items() if n > 1] == []
        assert ("restored from its snapshot" if state else "inputs below") in worker.log()
        assert worker.stop() == 0, worker.log()[-3000:]
    finally:
        if worker.proc.poll() is None:
            worker.kill()
    assert collections.Counter(e["event"] for e in events)["open"] >= 3


def test_worker_incident_topic_set_summaries_go_on_and_incidents_come_beside_them(kafka_bootstrap, topics, tokenizer_dir,
                                                                                 tmp_path):
    from tests.kafka.helpers import answer_ids, consume

    inp, out, dlq, incidents = topics(2)
    records = produce_storm(kafka_bootstrap, inp, 40)
    worker = WorkerProcess(kafka_bootstrap, inp, out, dlq, f"g-{uuid.uuid4().hex}", tokenizer_dir,
                           tmp_path / "w.log", **{"worker-id": "w0", "incident-topic": incidents,
                                                  "incident-topology": STORM_TOPOLOGY, "incident-rules": STORM_RULES,
                                                  "incident-update-interval-s": UPDATE_S})
    try:
        answers = consume(kafka_bootstrap, [out, dlq], lambda g: len(g) >= 40)
        events = read_events(kafka_bootstrap, incidents, all_listed(40))
        assert sorted(answer_ids(answers, out)) == sorted(r.id for r in records)  # one summary per alarm, as before
        assert len(listed(events)) == 40 and set(listed(events).values()) == {1}
        assert worker.stop() == 0, worker.log()[-3000:]  # SIGTERM drains both loops
    finally:
        if worker.proc.poll() is None:
            worker.kill()
    assert "incidents: drained (clean)" in worker.log()


def test_worker_exactly_once_sends_the_models_text_of_a_new_incident_as_a_later_update(kafka_bootstrap, topics,
                                                                                     tokenizer_dir, tmp_path):
    """The combined worker under exactly-once (state topic by default): each `open` is also asked of the
    model; the tiny random model writes past the grounded opening, so its text follows as an `update`
    carrying `model_summary` and no inputs, in sequence, read_committed, every alarm still listed once."""
    inp, out, dlq, incidents = topics(2)
    produce_storm(kafka_bootstrap, inp, 40)
    worker = WorkerProcess(kafka_bootstrap, inp, out, dlq, f"g-{uuid.uuid4().hex}", tokenizer_dir,
                           tmp_path / "w.log", **{"worker-id": "w0", "processing-guarantee": "exactly-once",
                                                  "incident-topic": incidents, "incident-topology": STORM_TOPOLOGY,
                                                  "incident-rules": STORM_RULES, "incident-update-interval-s": UPDATE_S})
    try:
        events = read_events(kafka_bootstrap, incidents, lambda ev: len(listed(ev)) >= 40 and any(
            e.get("model_summary") for e in ev), wait_s=120)
        assert worker.stop() == 0, worker.log()[-3000:]
    finally:
        if worker.proc.poll() is None:
            worker.kill()
    follow_ups = [e for e in events if e.get("model_summary")]
    assert follow_ups, worker.log()[-3000:]
    opened = {e["incident_id"] for e in events if e["event"] == "open"}
    for f in follow_ups:
        assert f["event"] == "update" and f["incident_id"] in opened and not f.get("inputs")
        assert not f["model_summary"].startswith(f["summary"][:20])  # the model's words only, not the opening
    for incident in opened:  # one event per sequence number, in order, the follow-up among them
        seqs = [e["sequence"] for e in events if e["incident_id"] == incident]
        assert seqs == list(range(1, len(seqs) + 1)), seqs
    assert len(listed(events)) == 40 and set(listed(events).values()) == {1}


def test_worker_sigkill_incident_only_at_least_once_no_alarm_in_no_incident(kafka_bootstrap, topics, tokenizer_dir,
                                                                            tmp_path, monkeypatch):
    inp, out, dlq, incidents = topics(2)
    group = f"g-{uuid.uuid4().hex}"
    extra = {"worker-id": "w0", "processing-guarantee": "at-least-once", "incident-topic": incidents,
             "incident-topology": STORM_TOPOLOGY, "incident-rules": STORM_RULES, "incident-update-interval-s": UPDATE_S}
    monkeypatch.setenv("TELESUM_INCIDENT_ONLY", "true")
    produce_storm(kafka_bootstrap, inp, 300, key_by="element")
    worker = WorkerProcess(kafka_bootstrap, inp, out, dlq, group, tokenizer_dir, tmp_path / "w0.log", **extra)
    try:
        read_events(kafka_bootstrap, incidents, lambda e: len(listed(e)) >= 80)
        worker.kill()
        worker = WorkerProcess(kafka_bootstrap, inp, out, dlq, group, tokenizer_dir, tmp_path / "w1.log", **extra)
        events = read_events(kafka_bootstrap, incidents, all_listed(300), wait_s=90)
        assert len(listed(events)) == 300, worker.log()[-3000:]  # at-least-once: some may be listed twice
        assert worker.stop() == 0, worker.log()[-3000:]
    finally:
        if worker.proc.poll() is None:
            worker.kill()


def test_incident_loop_undecodable_batch_exit_drains_the_other_partitions_then_raises(kafka_bootstrap, topics,
                                                                                    monkeypatch):
    import kafka.codec
    from kafka import TopicPartition

    from tests.kafka.foreign import large_record, produce_foreign
    from worker.kafka.undecodable import UndecodableBatch
    from worker.samples import iter_generate

    inp, out, dlq, incidents = topics(2)
    produce_foreign(kafka_bootstrap, inp, [large_record(i, "p0a") for i in range(3)], partition=0)
    produce_foreign(kafka_bootstrap, inp, [large_record(i, "p0z") for i in range(4)], "zstd", partition=0)
    produce_foreign(kafka_bootstrap, inp, [r for r, _ in iter_generate(40, "storm")], partition=1)
    monkeypatch.setattr(kafka.codec, "has_zstd", lambda: False)
    kafka_settings = worker_settings(kafka_bootstrap, inp, out, dlq, processing_guarantee="exactly-once",
                                     on_undecodable_batch="exit")
    settings = IncidentSettings(topic=incidents, topology=STORM_TOPOLOGY, rules=STORM_RULES,
                                update_interval_s=float(UPDATE_S))
    loop = IncidentLoop(incident_kafka_settings(kafka_settings, settings), settings, RoomConfig.from_settings(settings))
    raised: list[BaseException] = []

    def serve() -> None:
        try:
            loop.run(threading.Event())
        except UndecodableBatch as exc:
            raised.append(exc)

    thread = threading.Thread(target=serve, daemon=True)
    thread.start()
    thread.join(60)
    assert not thread.is_alive() and len(raised) == 1
    assert (raised[0].stuck.tp, raised[0].stuck.offset) == (TopicPartition(inp, 0), 3)
    assert loop.counts.drained_cleanly  # what was read before the stop went out in the last transaction
    events = read_events(kafka_bootstrap, incidents, lambda e: False, wait_s=3)
    assert not [k for k in listed(events) if k[0] == 0 and k[1] >= 3]  # nothing of the bad batch or after it


def test_worker_incident_loop_beside_summaries_undecodable_batch_exit_exits_6(kafka_bootstrap, topics, tokenizer_dir,
                                                                              tmp_path, monkeypatch):
    import os

    from kafka import KafkaConsumer, TopicPartition
    from kafka.structs import OffsetAndMetadata

    from tests.kafka.foreign import large_record, produce_foreign
    from worker.samples import iter_generate

    inp, out, dlq, incidents = topics(2)
    group = f"g-{uuid.uuid4().hex}"
    produce_foreign(kafka_bootstrap, inp, [large_record(i, "p0z") for i in range(4)], "zstd", partition=0)
    produce_foreign(kafka_bootstrap, inp, [r for r, _ in iter_generate(10, "storm")], partition=1)
    # The summaries' group is past the batch already: only the incident loop (its own group) meets it.
    committer = KafkaConsumer(bootstrap_servers=kafka_bootstrap, group_id=group, enable_auto_commit=False)
    try:
        committer.commit({TopicPartition(inp, 0): OffsetAndMetadata(4, "", -1)})
    finally:
        committer.close()
    # The worker process reads zstd as if its library were missing.
    site = tmp_path / "site"
    site.mkdir()
    (site / "sitecustomize.py").write_text("import kafka.codec\nkafka.codec.has_zstd = lambda: False\n")
    monkeypatch.setenv("PYTHONPATH", os.pathsep.join(filter(None, [str(site), os.environ.get("PYTHONPATH")])))
    monkeypatch.setenv("TELESUM_ALLOW_MISSING_CODECS", "true")
    worker = WorkerProcess(kafka_bootstrap, inp, out, dlq, group, tokenizer_dir, tmp_path / "w.log",
                           **{"worker-id": "w0", "incident-topic": incidents, "on-undecodable-batch": "exit",
                              "incident-topology": STORM_TOPOLOGY, "incident-rules": STORM_RULES})
    try:
        assert worker.wait(180) == 6, worker.log()[-3000:]  # the code the summaries loop gives the same end
    finally:
        if worker.proc.poll() is None:
            worker.kill()
    assert "incidents: the incident loop stopped: UndecodableBatch" in worker.log()
