"""`telesum bench incidents --broker HOST:PORT`: the alarm data set through a real broker and a real
`telesum worker --incident-only` (exactly-once, topology and rules as CSV files from `convert.py`).

The alarms become bare VES fault events (`sourceName` dev-<device>, `alarmCondition` A<type>, times from
the CSV on a fixed base epoch), keyed by their element's topology component (the site a real producer
keys by: one incident's alarms meet in one partition). Two phases, each on fresh topics:

- paced: the busiest `--hours` of the data set produced at `--speedup` times real time; per incident,
  the wall time from its first alarm's send to its `open` event read by a read_committed consumer;
- backlog: every alarm produced first, then the worker started: alarms/s held is the inputs over the
  time from the worker's first event to the last input listed; the grouping figures of the whole set
  (`incidents.figures`) and 0 in none / 0 in two come from what the consumer read.
"""

from __future__ import annotations

import collections
import os
import signal
import subprocess
import sys
import tempfile
import time
import uuid
from pathlib import Path

import msgspec
import numpy as np

from worker.incidents.convert import convert, element_name, type_name
from worker.incidents.graph import Topology

# The data set's times are seconds from its start; as VES epochs they need a base (2027-01-15 08:00 UTC).
VES_BASE_EPOCH = 1_800_000_000.0
PARTITIONS = 4
# The worker's commit (and transaction) interval: an `open` goes out at most this long after it is made.
COMMIT_INTERVAL_S = "0.2"
SESSION_TIMEOUT_MS = "6000"


def ves_bytes(i: int, alarm_id: int, device_id: int, t: float) -> bytes:
    micros = int((VES_BASE_EPOCH + t) * 1e6)
    return msgspec.json.encode({"event": {
        "commonEventHeader": {"domain": "fault", "eventId": f"fault{i}", "eventName": f"Fault_{type_name(alarm_id)}",
                              "sourceName": element_name(device_id), "reportingEntityName": "bench",
                              "startEpochMicrosec": micros, "lastEpochMicrosec": micros, "priority": "High",
                              "sequence": i, "version": "4.1", "vesEventListenerVersion": "7.2.1"},
        "faultFields": {"alarmCondition": type_name(alarm_id), "eventSeverity": "MAJOR", "eventSourceType": "bench",
                        "faultFieldsVersion": "4.0", "specificProblem": f"alarm {type_name(alarm_id)}",
                        "vfStatus": "Active"}}})


def component_keys(topology: Topology) -> dict[str, bytes]:
    """element -> its topology component's key (elements outside the topology: their own name)."""
    keys: dict[str, bytes] = {}
    for start in sorted(topology.adjacent):
        if start in keys:
            continue
        key, todo = f"region-{len(set(keys.values()))}".encode(), [start]
        keys[start] = key
        while todo:
            for nxt in topology.adjacent[todo.pop()]:
                if nxt not in keys:
                    keys[nxt] = key
                    todo.append(nxt)
    return keys


def busiest(rows: np.ndarray, hours: float) -> np.ndarray:
    times = rows[:, 2]
    ends = np.searchsorted(times, times + hours * 3600, side="left")
    first = int(np.argmax(ends - np.arange(len(times))))
    return rows[first:ends[first]]


class Reader:
    """A read_committed consumer of the incidents topic in a thread: events with their receipt times."""

    def __init__(self, bootstrap: str, topic: str) -> None:
        import threading

        from kafka import KafkaConsumer

        self.events: list[tuple[float, dict]] = []
        self._stop = threading.Event()
        self._consumer = KafkaConsumer(topic, bootstrap_servers=bootstrap, auto_offset_reset="earliest",
                                       enable_auto_commit=False, group_id=None, isolation_level="read_committed")
        self._thread = threading.Thread(target=self._run, daemon=True)
        self._thread.start()

    def _run(self) -> None:
        while not self._stop.is_set():
            for batch in self._consumer.poll(timeout_ms=100).values():
                now = time.time()
                self.events.extend((now, msgspec.json.decode(r.value)) for r in batch)

    def listed(self) -> collections.Counter:
        return collections.Counter((i["partition"], i["offset"]) for _, e in list(self.events) for i in e.get("inputs", []))

    def close(self) -> None:
        self._stop.set()
        self._thread.join(5)
        self._consumer.close()


def _topics(bootstrap: str, run: str) -> tuple[str, str]:
    from kafka.admin import KafkaAdminClient, NewTopic

    inp, out = f"bench-alarms-{run}", f"bench-incidents-{run}"
    admin = KafkaAdminClient(bootstrap_servers=bootstrap)
    try:
        admin.create_topics([NewTopic(inp, PARTITIONS, 1), NewTopic(out, PARTITIONS, 1)])
    finally:
        admin.close()
    return inp, out


def _worker(bootstrap: str, inp: str, out: str, files: tuple[Path, Path], log: Path, state: bool) -> subprocess.Popen:
    args = {"bootstrap-servers": bootstrap, "input-topic": inp, "output-topic": f"{inp}-summaries",
            "dlq-topic": f"{inp}-dlq", "group-id": f"bench-{inp}", "worker-id": "bench", "incident-topic": out,
            "processing-guarantee": "exactly-once", "incident-topology": str(files[0]),
            "incident-rules": str(files[1]), "commit-interval-s": COMMIT_INTERVAL_S, "max-poll-records": "2000",
            # A killed member's partitions move after this long (the default 45 s would dominate the SIGKILL run).
            "session-timeout-ms": SESSION_TIMEOUT_MS, "heartbeat-interval-ms": "1000",
            "incident-state-topic": f"{out}.state" if state else "none"}  # none: recompute (the default keeps state)
    cmd = [sys.executable, "-m", "worker.cli", "worker"] + [x for k, v in args.items() for x in (f"--{k}", v)]
    env = dict(os.environ, TELESUM_INCIDENT_ONLY="true")
    return subprocess.Popen(cmd, stdout=open(log, "ab"), stderr=subprocess.STDOUT, env=env)  # noqa: SIM115


def _wait_assigned(log: Path, worker: subprocess.Popen, wait_s: float = 120) -> None:
    """Until the worker holds its partitions (its log says so), so paced alarms meet a serving worker."""
    deadline = time.monotonic() + wait_s
    while time.monotonic() < deadline and worker.poll() is None:
        if b"incidents: assigned [(" in log.read_bytes():
            return
        time.sleep(0.2)
    raise RuntimeError(f"the worker did not get its partitions within {wait_s:.0f} s; see {log}")


def _produce(bootstrap: str, topic: str, rows: np.ndarray, keys: dict[str, bytes], speedup: float,
             sent_at: dict) -> dict[tuple[int, int], int]:
    """Send `rows` (paced at `speedup` when > 0); (partition, offset) -> row index."""
    from kafka import KafkaProducer

    producer = KafkaProducer(bootstrap_servers=bootstrap, linger_ms=5, batch_size=256 * 1024)
    futures = []
    start, t0 = time.time(), float(rows[0, 2])
    for i, (a, d, t) in enumerate(rows[:, :3].tolist()):
        if speedup > 0 and (wait := start + (t - t0) / speedup - time.time()) > 0:
            time.sleep(wait)
        element = element_name(d)
        futures.append((i, time.time(), producer.send(topic, key=keys.get(element, element.encode()),
                                                      value=ves_bytes(i, a, d, t))))
    producer.flush()
    producer.close()
    where = {}
    for i, at, future in futures:
        meta = future.get(timeout=30)
        where[(meta.partition, meta.offset)] = i
        sent_at[(meta.partition, meta.offset)] = at
    return where


def phase(bootstrap: str, rows: np.ndarray, files, keys, speedup: float, log: Path, wait_s: float,
          kill_at_s: tuple[float, ...] = (), state: bool = False) -> dict:
    """One phase on fresh topics: what the consumer read, when, and where each input came from. The
    worker is SIGKILLed at each of `kill_at_s` (seconds after it started) and started again at once."""
    inp, out = _topics(bootstrap, uuid.uuid4().hex[:8])
    reader = Reader(bootstrap, out)
    sent_at: dict = {}
    worker = None
    try:
        if speedup > 0:  # paced: the worker waits for the alarms
            worker = _worker(bootstrap, inp, out, files, log, state)
            _wait_assigned(log, worker)
        where = _produce(bootstrap, inp, rows, keys, speedup, sent_at)
        started = time.time()
        if worker is None:
            worker = _worker(bootstrap, inp, out, files, log, state)
        for at in kill_at_s:
            time.sleep(max(0.0, started + at - time.time()))
            worker.kill()
            worker.wait()
            worker = _worker(bootstrap, inp, out, files, log, state)
        deadline = time.monotonic() + wait_s
        while time.monotonic() < deadline and len(reader.listed()) < len(rows):
            time.sleep(0.5)
        worker.send_signal(signal.SIGTERM)
        code = worker.wait(60)
    finally:
        if worker is not None and worker.poll() is None:
            worker.kill()
        reader.close()
    return {"events": reader.events, "where": where, "sent_at": sent_at, "started": started, "exit_code": code,
            "uncommitted": uncommitted(bootstrap, inp, f"bench-{inp}")}


def uncommitted(bootstrap: str, topic: str, group: str) -> dict[int, int]:
    """Per partition, the inputs above the group's committed offset: what a restart would read again
    (the open incidents' range, recomputed)."""
    from kafka import KafkaConsumer, TopicPartition

    consumer = KafkaConsumer(bootstrap_servers=bootstrap, group_id=group, enable_auto_commit=False)
    try:
        parts = [TopicPartition(topic, p) for p in range(PARTITIONS)]
        ends = consumer.end_offsets(parts)
        return {tp.partition: ends[tp] - (consumer.committed(tp) or 0) for tp in parts}
    finally:
        consumer.close()


def groups_of(events: list[tuple[float, dict]], where: dict, n: int) -> tuple[dict, collections.Counter]:
    """incidents.figures' input ({"groups", "roots"}) from the events read, and how often each input was listed."""
    owner, merged, root = {}, {}, {}
    listed: collections.Counter = collections.Counter()
    for _, e in events:
        for i in e.get("inputs", []):
            listed[(i["partition"], i["offset"])] += 1
            owner[where[(i["partition"], i["offset"])]] = e["incident_id"]
        root[e["incident_id"]] = e["root_cause"]["alarm_type"]
        if e.get("merged_into"):
            merged[e["incident_id"]] = e["merged_into"]

    def final(incident_id: str) -> str:
        while incident_id in merged:
            incident_id = merged[incident_id]
        return incident_id

    groups = [final(owner[i]) if i in owner else f"none-{i}" for i in range(n)]
    return {"groups": groups, "roots": {g: root.get(g, "none") for g in set(groups)}}, listed


def open_delays(events: list[tuple[float, dict]], sent_at: dict) -> list[float]:
    return [at - sent_at[(e.get("inputs", [])[0]["partition"], e.get("inputs", [])[0]["offset"])]
            for at, e in events if e["event"] == "open" and e.get("inputs", [])]


def temp_files(data: Path) -> tuple[Path, Path]:
    return convert(data, Path(tempfile.mkdtemp(prefix="incidents-bench-")))
