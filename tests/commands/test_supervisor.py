"""`telesum worker --gpus`: parsing the GPU set, the children's environment, the supervisor's signal
and death handling (with stand-in children), and two CPU workers under the supervisor against a
real broker (tiny random-weight model, as in test_worker_e2e.py)."""

from __future__ import annotations

import collections
import io
import os
import re
import signal
import socket
import sys
import threading
import time
import urllib.request
import uuid

import pytest
from prometheus_client.parser import text_string_to_metric_families

from tests.kafka.helpers import WorkerProcess, answer_ids, consume, produce_records
from worker.settings.kafka import SettingsError
from worker.settings.load import from_values, load_settings
from worker.commands.supervisor import Slot, Supervisor, child_environment, describe_exit, parse_gpus

# ---- parsing --gpus -------------------------------------------------------------------------


def test_parse_gpus_all_one_slot_per_visible_gpu():
    slots = parse_gpus("all", ["0", "1", "2"])
    assert slots == [Slot(0, "gpu0", "0", "cuda"), Slot(1, "gpu1", "1", "cuda"), Slot(2, "gpu2", "2", "cuda")]


def test_parse_gpus_count_takes_the_first_n():
    assert [s.visible_devices for s in parse_gpus("2", ["4", "5", "6"])] == ["4", "5"]


def test_parse_gpus_list_indexes_visible_gpus_ports_by_position():
    slots = parse_gpus("2, 0", ["4", "5", "6"])
    assert [(s.index, s.name, s.visible_devices) for s in slots] == [(0, "gpu6", "6"), (1, "gpu4", "4")]
    assert parse_gpus("1,", ["0", "1"]) == [Slot(0, "gpu1", "1", "cuda")]


def test_parse_gpus_repeated_index_shares_a_gpu_with_distinct_names():
    slots = parse_gpus("0,0", ["7"])
    assert [(s.name, s.visible_devices) for s in slots] == [("gpu7", "7"), ("gpu7.1", "7")]


def test_parse_gpus_cpu_mode_needs_no_gpu():
    assert parse_gpus("cpu:2", []) == [Slot(0, "cpu0", "", "cpu"), Slot(1, "cpu1", "", "cpu")]


def test_parse_gpus_without_cuda_raises_and_points_to_cpu_mode():
    with pytest.raises(SettingsError, match=r"no CUDA GPU is visible.*--gpus cpu:N"):
        parse_gpus("all", [])


@pytest.mark.parametrize("spec, pattern", [
    ("0", "count N > 0"), ("-1", "count N > 0"), ("two", "count N > 0"), ("cpu:0", "count N > 0"),
    ("cpu:x", "count N > 0"), ("3", "asks for 3 GPUs but only 2"),
    ("2,", "names GPU 2 but only 2"), ("0,a", "GPU indices"), (",", "GPU indices"),
])
def test_parse_gpus_bad_spec_raises_naming_the_flag(spec, pattern):
    with pytest.raises(SettingsError, match=pattern) as info:
        parse_gpus(spec, ["0", "1"])
    assert "--gpus (TELESUM_GPUS)" in str(info.value)


# ---- the children's environment ---------------------------------------------------------------


def test_child_environment_one_unsupervised_worker_per_slot():
    settings = from_values({"kafka.gpus": "2", "http.metrics_port": 9100, "kafka.security_protocol": "SASL_SSL",
                            "kafka.sasl_mechanism": "PLAIN", "kafka.sasl_plain_username": "u",
                            "kafka.sasl_plain_password": "secret", "engine.max_context": 2048,
                            "engine.token_budget": 4096}).settings
    base = {"PATH": "/bin", "TELESUM_INPUT_TOPIC": "stale-from-parent", "TELESUM_GPUS": "2",
            "TELESUM_CONFIG": "/parent/only.toml"}
    envs = [child_environment(settings, slot, base) for slot in parse_gpus("2", ["0", "1"])]
    for i, env in enumerate(envs):
        assert "TELESUM_GPUS" not in env and "TELESUM_CONFIG" not in env and env["PATH"] == "/bin"
        assert env["CUDA_VISIBLE_DEVICES"] == str(i) and env["TELESUM_DEVICE"] == "cuda"
        assert env["TELESUM_METRICS_PORT"] == str(9100 + i)
        assert env["TELESUM_WORKER_ID"] == f"telesum-worker-gpu{i}"
        child = load_settings(None, env)
        assert child.settings.kafka.input_topic == "telemetry" and child.settings.kafka.sasl_plain_password == "secret"
        assert child.settings.engine.max_context == 2048 and child.settings.kafka.gpus is None
        assert child.settings.kafka.group_id == settings.kafka.group_id
        # an operator-set budget stays operator-set in the child: the banner and the probe see it so
        assert child.settings.engine.token_budget == 4096 and child.is_set("engine.token_budget")
        assert not child.is_set("engine.max_seqs_per_bin")


def test_child_environment_metrics_off_stays_off():
    env = child_environment(from_values({"kafka.gpus": "cpu:2"}).settings, Slot(1, "cpu1", "", "cpu"), {})
    assert env["TELESUM_METRICS_PORT"] == "0" and env["CUDA_VISIBLE_DEVICES"] == "" and env["TELESUM_DEVICE"] == "cpu"


def test_child_environment_explicit_device_conflict_raises():
    with pytest.raises(SettingsError, match="--device 'cuda:1' conflicts"):
        child_environment(from_values({"kafka.gpus": "all", "engine.device": "cuda:1"}).settings,
                          Slot(0, "gpu0", "0", "cuda"), {})


def test_describe_exit_signal_and_code():
    assert describe_exit(-9) == "killed by SIGKILL" and describe_exit(3) == "exit code 3"


# ---- the supervisor with stand-in children ----------------------------------------------------

# Prints ready, drains on SIGTERM (exit FAKE_EXIT_<slot> or 0); a slot named in FAKE_HANG ignores SIGTERM.
_FAKE_CHILD = """
import os, signal, sys, time
name = os.environ["TELESUM_WORKER_ID"].rsplit("-", 1)[1]
def drain(signum, frame):
    print("draining", flush=True)
    sys.exit(int(os.environ.get("FAKE_EXIT_" + name, "0")))
signal.signal(signal.SIGTERM, signal.SIG_IGN if os.environ.get("FAKE_HANG") == name else drain)
print("ready pid", os.getpid(), flush=True)
while True:
    time.sleep(0.05)
"""


def _fake_supervisor(n: int, drain_timeout_s: float = 30.0, margin_s: float = 30.0):
    out = io.BytesIO()
    sup = Supervisor(from_values({"kafka.gpus": f"cpu:{n}", "kafka.drain_timeout_s": drain_timeout_s}).settings,
                     parse_gpus(f"cpu:{n}", []), [sys.executable, "-c", _FAKE_CHILD], out=out, margin_s=margin_s)
    sup.start()
    for child in sup.children:  # wait for ready, so the SIGTERM handler is in place
        deadline = time.monotonic() + 30
        while f"[{child.slot.name}] ready".encode() not in out.getvalue():
            assert time.monotonic() < deadline, out.getvalue()
            time.sleep(0.02)
    return sup, out


def _run_then(sup: Supervisor, action) -> int:
    threading.Thread(target=action, daemon=True).start()
    return sup.run()


def test_supervisor_sigterm_forwarded_every_child_drains_exit_zero():
    sup, out = _fake_supervisor(2)
    code = _run_then(sup, lambda: sup.forward(signal.SIGTERM))
    assert code == 0
    assert b"[cpu0] draining" in out.getvalue() and b"[cpu1] draining" in out.getvalue()
    assert [c.returncode for c in sup.children] == [0, 0]


def test_supervisor_child_dies_others_keep_serving_then_exit_nonzero(caplog):
    sup, out = _fake_supervisor(2)
    victim = sup.children[1]

    def kill_then_stop():
        victim.proc.send_signal(signal.SIGKILL)
        deadline = time.monotonic() + 30
        while victim.returncode is None and time.monotonic() < deadline:
            time.sleep(0.02)
        assert sup.children[0].proc.poll() is None  # the survivor still serves
        sup.forward(signal.SIGTERM)

    with caplog.at_level("INFO", logger="worker.commands.supervisor"):
        code = _run_then(sup, kill_then_stop)
    assert code == 1
    assert victim.unexpected and sup.children[0].returncode == 0
    assert b"[cpu0] draining" in out.getvalue()
    text = caplog.text
    assert re.search(rf"worker cpu1 \(pid {victim.proc.pid}\) died unexpectedly: killed by SIGKILL; "
                     r"1 of 2 workers still serving", text)
    assert "1 of 2 workers failed" in text


def test_supervisor_unclean_drain_exit_code_reported_nonzero(monkeypatch, caplog):
    monkeypatch.setenv("FAKE_EXIT_cpu0", "3")
    sup, _ = _fake_supervisor(2)
    with caplog.at_level("INFO", logger="worker.commands.supervisor"):
        assert _run_then(sup, lambda: sup.forward(signal.SIGTERM)) == 1
    assert re.search(r"worker cpu0 \(pid \d+\) failed to drain cleanly: exit code 3", caplog.text)


def test_supervisor_child_past_drain_deadline_killed_nonzero(monkeypatch, caplog):
    monkeypatch.setenv("FAKE_HANG", "cpu1")
    sup, _ = _fake_supervisor(2, drain_timeout_s=0.2, margin_s=0.3)
    with caplog.at_level("INFO", logger="worker.commands.supervisor"):
        assert _run_then(sup, lambda: sup.forward(signal.SIGTERM)) == 1
    assert sup.children[1].killed_at_deadline and sup.children[1].returncode == -signal.SIGKILL
    assert "worker cpu1" in caplog.text and "killed at the drain deadline" in caplog.text


_ORPHAN_PARENT = """
import os, subprocess, sys, time
child = subprocess.Popen([sys.executable, "-c", sys.argv[1]], env=dict(os.environ, TELESUM_SUPERVISOR_PID=str(os.getpid())))
time.sleep(120)
"""
_ORPHAN_CHILD = """
import signal, sys, time
from worker.commands.supervisor import follow_supervisor
signal.signal(signal.SIGTERM, lambda *a: (print("sigterm", flush=True), sys.exit(0)))
follow_supervisor()
print("ready", flush=True)
time.sleep(120)
"""


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="PR_SET_PDEATHSIG is Linux only")
def test_follow_supervisor_parent_killed_child_gets_sigterm():
    import subprocess

    parent = subprocess.Popen([sys.executable, "-c", _ORPHAN_PARENT, _ORPHAN_CHILD], stdout=subprocess.PIPE)
    try:
        assert parent.stdout.readline() == b"ready\n"
        parent.kill()
        parent.wait()
        assert parent.stdout.readline() == b"sigterm\n"  # the orphan drains instead of serving on
    finally:
        parent.stdout.close()


def test_worker_service_bad_gpus_logs_message_exit_2(caplog):
    from worker.cli import build_parser
    from worker.commands import worker as service

    argv = ["worker", "--gpus", "cpu:0"]
    assert service.run(build_parser(argv).parse_args(argv)) == 2
    assert "--gpus (TELESUM_GPUS) must be 'all', a count N > 0" in caplog.text


# ---- two CPU workers under the supervisor, real broker --------------------------------------


@pytest.fixture
def supervised(kafka_bootstrap, make_topic, tokenizer_dir, tmp_path):
    """Factory: a `telesum worker --gpus cpu:2` process on fresh topics; killed at teardown if alive."""
    started: list[WorkerProcess] = []

    def start(**extra):
        inp, out, dlq = make_topic("in", 4), make_topic("out"), make_topic("dlq")
        proc = WorkerProcess(kafka_bootstrap, inp, out, dlq, f"g-{uuid.uuid4().hex}", tokenizer_dir,
                             tmp_path / "supervisor.log", gpus="cpu:2", **extra)
        started.append(proc)
        return proc, inp, out, dlq

    yield start
    for proc in started:
        if proc.proc.poll() is None:
            proc.proc.send_signal(signal.SIGINT)  # forwarded: the children go too
            try:
                proc.wait(60)
            except Exception:  # noqa: BLE001 - teardown only
                proc.kill()


def _wait_log(proc: WorkerProcess, pattern: str, wait_s: float = 90) -> re.Match:
    deadline = time.monotonic() + wait_s
    while time.monotonic() < deadline:
        match = re.search(pattern, proc.log())
        if match:
            return match
        assert proc.proc.poll() is None, f"supervisor exited:\n{proc.log()[-4000:]}"
        time.sleep(0.2)
    raise AssertionError(f"{pattern!r} not in the supervisor log:\n{proc.log()[-4000:]}")


def _both_assigned(proc: WorkerProcess) -> dict[str, int]:
    """Wait until both children hold partitions; their pids by slot name."""
    pids = {name: int(_wait_log(proc, rf"started worker {name} \(pid (\d+)").group(1)) for name in ("cpu0", "cpu1")}
    for name in pids:
        _wait_log(proc, rf"\[{name}\].*assigned \[\('")
    return pids


def _free_port_pair() -> int:
    for _ in range(50):
        with socket.socket() as a:
            a.bind(("127.0.0.1", 0))
            base = a.getsockname()[1]
            if base >= 65535:
                continue
            with socket.socket() as b:
                try:
                    b.bind(("127.0.0.1", base + 1))
                except OSError:
                    continue
        return base
    raise RuntimeError("no two consecutive free ports")


def _scrape(port: int) -> dict[str, list]:
    text = urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=10).read().decode()
    return {f.name: f.samples for f in text_string_to_metric_families(text)}


def _metrics_after(base: int, published_at_least: int) -> dict[str, dict[str, float]]:
    """Per child: consumed, published and prefill count from its /metrics (port base + index), once
    the children report `published_at_least` summaries together. The output topic can show a
    summary before its worker handled the broker's acknowledgement, hence the wait."""
    deadline = time.monotonic() + 30
    while True:
        per_child = {}
        for i, name in enumerate(("cpu0", "cpu1")):
            metrics = _scrape(base + i)
            (consumed,) = metrics["telesum_records_consumed"]
            assert consumed.labels == {"gpu": "cpu", "worker": f"telesum-worker-{name}"}
            per_child[name] = {
                "consumed": consumed.value, "published": metrics["telesum_summaries_published"][0].value,
                "prefills": next(s.value for s in metrics["telesum_prefill_seconds"] if s.name.endswith("_count"))}
        if sum(c["published"] for c in per_child.values()) >= published_at_least or time.monotonic() > deadline:
            return per_child
        time.sleep(0.2)


@pytest.mark.kafka
def test_supervisor_two_cpu_workers_share_then_killed_child_reported_every_id_answered(kafka_bootstrap,
                                                                                      supervised):
    base = _free_port_pair()
    proc, inp, out, dlq = supervised(**{"metrics-port": str(base), "max-poll-records": "8"})
    pids = _both_assigned(proc)
    # 1. Two processes share the partitions; every id is answered.
    ids = produce_records(kafka_bootstrap, inp, range(40))
    got = consume(kafka_bootstrap, [out, dlq], lambda g: set(answer_ids(g, out)) >= set(ids))
    assert set(answer_ids(got, out)) == set(ids), f"missing: {set(ids) - set(answer_ids(got, out))}"
    per_child = _metrics_after(base, len(ids))
    assert all(c["consumed"] > 0 for c in per_child.values()), per_child  # each served some partitions
    assert sum(c["published"] for c in per_child.values()) >= len(ids), per_child
    assert sum(c["prefills"] for c in per_child.values()) >= len(ids), per_child
    # 2. One child is killed: reported, the survivor takes its partitions and answers every new id.
    os.kill(pids["cpu1"], signal.SIGKILL)
    _wait_log(proc, rf"worker cpu1 \(pid {pids['cpu1']}\) died unexpectedly: killed by SIGKILL; "
                    r"1 of 2 workers still serving")
    ids += produce_records(kafka_bootstrap, inp, range(40, 70))
    got = consume(kafka_bootstrap, [out, dlq], lambda g: set(answer_ids(g, out)) >= set(ids))
    counts = collections.Counter(answer_ids(got, out))
    assert set(counts) == set(ids), f"missing: {set(ids) - set(counts)}"
    assert proc.proc.poll() is None, "the supervisor exited while a worker still served"
    # 3. SIGTERM: the survivor drains cleanly, the supervisor exits non-zero naming the dead child.
    proc.signal(signal.SIGTERM)
    assert proc.wait() == 1, proc.log()[-4000:]
    log = proc.log()
    assert re.search(r"\[cpu0\].*drained \(clean\)", log)
    assert re.search(rf"worker cpu0 \(pid {pids['cpu0']}\) exited: exit code 0", log)
    assert re.search(rf"worker cpu1 \(pid {pids['cpu1']}\) died while serving: killed by SIGKILL", log)
    print(f"supervisor: {sum(n - 1 for n in counts.values())} duplicate answers of {len(ids)}")


def test_supervisor_json_logs_relayed_whole_without_prefix():
    out = io.BytesIO()
    settings = from_values({"kafka.gpus": "cpu:1", "log.format": "json"}).settings
    sup = Supervisor(settings, parse_gpus("cpu:1", []), [sys.executable, "-c", 'print(\'{"message": "hi"}\')'],
                     out=out)
    sup.start()
    sup.run()  # the stand-in exits by itself: reported as a death, which is not what this test is about
    assert out.getvalue().splitlines() == [b'{"message": "hi"}']
