"""The fault harness's user-felt figures without a broker: time to first answer per kind, and a
partition that stops answering while it holds work is reported stalled, one whose slow input only
delays its own answer is not."""

from __future__ import annotations

from worker.benchmarks.faults_latency import first_answer_s, idle_with_work, input_kind, stalled


def test_input_kind_follows_the_keys_the_harness_sends():
    assert [input_kind(k) for k in (b"r12", b"h3", b"x-bomb_zstd", b"huge", b"gnb-du-0007", None)] == \
        ["record", "hostile", "hostile", "huge", "log_line", "log_line"]


def _timeline(held_behind_slow: bool):
    """Partition 0: a slow input at t=0 answered at t=100, inputs every second after it; partition 1
    answers everything in 0.5 s. held_behind_slow: partition 0's later inputs wait for the slow one."""
    sent, answered, kinds, answer_kinds = {}, {}, {}, {}
    sent[(0, 0)], answered[(0, 0)], kinds[(0, 0)] = (0.0, 10), 100.0, "huge"
    for i in range(1, 50):
        sent[(0, i)] = (float(i), 10)
        answered[(0, i)] = 100.0 if held_behind_slow else i + 0.5
        kinds[(0, i)] = "hostile" if i % 10 == 0 else "record"
        answer_kinds[(0, i)] = "dead_letter" if i % 10 == 0 else "summary"
        sent[(1, i)], answered[(1, i)], kinds[(1, i)] = (float(i), 10), i + 0.5, "log_line"
    return sent, answered, kinds, answer_kinds


def test_a_partition_held_by_one_slow_input_is_stalled():
    sent, answered, kinds, answer_kinds = _timeline(held_behind_slow=True)
    idle = idle_with_work(sent, answered, end=120.0)
    assert idle[0]["idle_s"] == 99.0 and idle[0]["waiting"] == 50 and idle[1]["idle_s"] == 0.0
    assert stalled(idle, 60.0) == [0]
    figures = first_answer_s(sent, kinds, answered, answer_kinds)
    assert figures["by_input"]["hostile"]["max"] == 90.0 and figures["by_answer"]["dead_letter"]["count"] == 4


def test_a_slow_input_that_delays_only_its_own_answer_stalls_nothing():
    sent, answered, kinds, answer_kinds = _timeline(held_behind_slow=False)
    idle = idle_with_work(sent, answered, end=120.0)
    # 50.5 s with the slow input alone in progress: not a stall; with another input waiting, at most
    # the time to the next answer.
    assert idle[0]["idle_s"] == 0.5 and stalled(idle, 60.0) == []
    figures = first_answer_s(sent, kinds, answered, answer_kinds)
    assert figures["by_input"]["huge"] == {"count": 1, "p50": 100.0, "p99": 100.0, "max": 100.0, "unanswered": 0}
    assert figures["by_input"]["record"]["max"] == 0.5 and figures["by_answer"]["dead_letter"]["max"] == 0.5


def test_an_input_never_answered_counts_to_the_end_of_the_run():
    sent = {(2, 0): (0.0, 1), (2, 1): (1.0, 1), (2, 2): (2.0, 1)}
    answered = {(2, 0): 0.5}
    idle = idle_with_work(sent, answered, end=90.0)
    assert idle[2] == {"idle_s": 88.0, "from": 2.0, "waiting": 2} and stalled(idle, 60.0) == [2]
    assert first_answer_s(sent, {}, answered, {})["by_input"]["record"]["unanswered"] == 2
