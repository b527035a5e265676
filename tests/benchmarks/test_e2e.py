"""`telesum bench e2e`: the stage timers on their own, and one small run against the real broker."""

from __future__ import annotations

import json
import threading
import time

import pytest

from worker.benchmarks.e2e_stages import StageTimer
from worker.cli import main


class _Clock:
    """A perf_counter the test advances itself: durations without sleeping."""

    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


_clock = _Clock()


class _Thing:
    def outer(self, timer_inner) -> None:
        _clock.now += 0.02
        timer_inner()

    def inner(self) -> None:
        _clock.now += 0.03


@pytest.fixture
def fake_clock(monkeypatch):
    import worker.benchmarks.e2e_stages as stages

    monkeypatch.setattr(stages.time, "perf_counter", _clock)
    monkeypatch.setattr(time, "perf_counter", _clock)


def test_stage_timer_nested_calls_counted_exclusively(fake_clock) -> None:
    timer = StageTimer()
    thing = _Thing()
    timer.patch(thing, "inner", "inner")
    timer.patch(thing, "outer", "outer")
    timer.open_window(time.perf_counter())
    thing.outer(thing.inner)
    assert timer.calls == {"worker:outer": 1, "worker:inner": 1}
    # outer's own time excludes inner's: 0.02 s, not 0.05 s
    assert timer.seconds["worker:inner"] == pytest.approx(0.03)
    assert timer.seconds["worker:outer"] == pytest.approx(0.02)


def test_stage_timer_calls_outside_window_not_counted(fake_clock) -> None:
    timer = StageTimer()
    thing = _Thing()
    timer.patch(thing, "inner", "inner")
    thing.inner()                       # before any window opened: counted, then forgotten
    timer.open_window(time.perf_counter())
    timer.close_window(time.perf_counter())
    thing.inner()                       # after the window closed
    assert dict(timer.seconds) == {} and dict(timer.calls) == {}


def test_stage_timer_restore_undoes_patches(fake_clock) -> None:
    timer = StageTimer()
    thing = _Thing()
    timer.patch(thing, "inner", "inner")
    timer.patch(_Thing, "outer", "outer")
    wrapper = _Thing.__dict__["outer"]
    timer.restore()
    assert "inner" not in thing.__dict__
    assert _Thing.__dict__["outer"] is not wrapper  # the wrapper is gone again
    assert _Thing.outer.__name__ == "outer" and not hasattr(_Thing.outer, "__wrapped__")


def test_stage_timer_engine_thread_named_engine(fake_clock) -> None:
    timer = StageTimer()
    timer.open_window(time.perf_counter())
    work = timer.wrap("step", lambda: setattr(_clock, "now", _clock.now + 0.01))
    thread = threading.Thread(target=work, name="telesum-gpu-loop")
    thread.start()
    thread.join()
    assert list(timer.calls) == ["engine:step"]


def test_bench_e2e_zero_records_returns_2(capsys) -> None:
    assert main(["bench", "e2e", "--records", "0", "--bootstrap-servers", "127.0.0.1:1"]) == 2
    assert "--records" in capsys.readouterr().out


@pytest.mark.kafka
def test_bench_e2e_six_records_every_id_answered(kafka_bootstrap, tmp_path, capsys) -> None:
    chart = tmp_path / "e2e.png"
    rc = main(["bench", "e2e", "--records", "6", "--bootstrap-servers", kafka_bootstrap, "--max-new-tokens", "4",
               "--max-context", "2048", "--token-budget", "4096", "--json", "--chart", str(chart)])
    result = json.loads(capsys.readouterr().out)
    assert rc == 0, result["missing"]
    assert result["answered"] == 6 and result["missing"] == [] and result["config"]["records"] == 6
    assert result["summaries"] + result["dead_letters"] == 6 + result["duplicates"]
    assert result["records_per_s"] > 0 and result["window_s"] > 0
    stages = {(s["thread"], s["stage"]) for s in result["stages"]}
    for expected in [("worker", "decode + validate"), ("worker", "fact extraction"), ("worker", "tokenise"),
                     ("worker", "prompt render: messages"), ("worker", "publish (send call)"),
                     ("engine", "prefill (model)"), ("engine", "decode step (model)")]:
        assert expected in stages
    for thread in ("worker", "engine"):  # exclusive times plus the untimed rest make up the window
        total = sum(s["seconds"] for s in result["stages"] if s["thread"] == thread)
        assert total == pytest.approx(result["window_s"], abs=0.01)
    assert all(s["seconds"] >= 0 for s in result["stages"] if s["stage"] != "untimed (loop code, idle)")
    assert result["summary_timings_mean_s"]["total_s"] > 0
    assert chart.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    print(f"e2e (6 records): {result['records_per_s']} records/s, window {result['window_s']} s, "
          f"stages {[(s['thread'], s['stage'], s['seconds']) for s in result['stages']]}")
