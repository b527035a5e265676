"""`telesum bench quality`: the scoring rules, and one end-to-end run on a tiny sample."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch

from worker.benchmarks.quality import (
    aggregate,
    corpus,
    entity_named,
    is_echo,
    problem_keywords,
    problem_named,
    score,
    severity_right,
)
from worker.cli import main
from worker.messages import Facts, TelemetryRecord
from worker.prompts import copied_example_value, render_body
from worker.samples import generate


@pytest.mark.parametrize("summary", [
    "gNB-2854-DU reported high CPU usage.",
    "High CPU on gnb-2854-du (major).",
    "GNB_2854_DU: cpu at 93%",
    "Element gNB 2854 DU is overloaded",
])
def test_entity_named_case_and_separator_variants_match(summary):
    assert entity_named(summary, "gNB-2854-DU")


@pytest.mark.parametrize("summary", [
    "gNB-2854 reported high CPU usage.",      # the DU suffix is part of the name
    "gNB-28540-DU reported high CPU usage.",  # a different element
    "xgNB-2854-DU reported high CPU usage.",
    "site-12 reported high CPU usage.",
])
def test_entity_named_partial_or_other_name_rejected(summary):
    assert not entity_named(summary, "gNB-2854-DU")


def test_entity_named_without_truth_raises():
    with pytest.raises(ValueError, match="entity"):
        entity_named("anything", None)


def test_problem_named_needs_every_keyword_at_word_start():
    assert problem_named("Handover failures at gNB-1 (major)", ["handover", "fail"])
    assert problem_named("NG link to AMF-02 went DOWN", ["ng link", "down"])
    assert problem_named("GNSS synchronization was lost", ["synchronisation"])  # US spelling
    assert not problem_named("Handover completed at gNB-1", ["handover", "fail"])
    assert not problem_named("the uplink is down", ["ng link", "down"])
    assert not problem_named("a downgrade", ["grade"])  # inside a word, not at its start


def test_problem_keywords_missing_raises():
    with pytest.raises(ValueError, match="problemKeywords"):
        problem_keywords(Facts(entity="x"))


def test_severity_right_only_the_true_severity_named():
    assert severity_right("a MAJOR fault on gNB-1", "major")
    assert severity_right("informational report from gNB-1", "info")
    assert not severity_right("a major or critical fault", "major")  # two severities: ambiguous
    assert not severity_right("a fault on gNB-1", "major")
    assert not severity_right("a majority of cells", "major")
    with pytest.raises(ValueError, match="severity"):
        severity_right("x", "severe")


LINES = [
    "<131>1 2026-11-29T00:03:21.123Z gNB-0642 bgpd 812 BGP - BGP session with peer 10.1.2.3 down: hold timer expired",
    "<134>1 2026-11-29T00:03:25.000Z gNB-0642 oamd 120 HEARTBEAT - heartbeat sent to OSS, sequence 52",
]


@pytest.mark.parametrize("summary", [
    LINES[0],                                              # the whole line
    "BGP session with peer 10.1.2.3 down: hold timer expired.",  # a substring of it
    "gNB-0642 BGP session with peer 10.1.2.3 down hold timer expired",  # its words, reordered a bit
])
def test_is_echo_copied_line_detected(summary):
    assert is_echo(summary, LINES)


@pytest.mark.parametrize("summary", [
    "gNB-0642 lost its BGP session with peer 10.1.2.3 when the hold timer expired, a major fault at 00:03 UTC.",
    "",
])
def test_is_echo_own_words_or_empty_not_an_echo(summary):
    assert not is_echo(summary, LINES)


def test_score_and_aggregate_per_kind_and_overall():
    record = TelemetryRecord(id="s1", kind="syslog", body="\n".join(LINES))
    truth = Facts(entity="gNB-0642", severity="major", problem="BGP down", details={"problemKeywords": "bgp, down"})
    good = score(record, truth, "gNB-0642 lost its BGP session (peer down), a major fault at 00:03 UTC.")
    bad = score(record, truth, LINES[0])
    assert good == {"agrees": False, "entity": True, "problem": True, "severity": True, "echo": False, "empty": False,
                    "copied": False, "placeholder": False, "unchecked_kpi": False, "senders": True}
    assert bad["echo"] and not bad["severity"]
    rows = [{"kind": "syslog", "length": "short", "score": good}, {"kind": "pm", "length": "short", "score": bad}]
    groups = aggregate(rows)
    assert list(groups)[0] == "all" and groups["all"]["n"] == 2
    assert groups["all"]["entity"] == 1.0 and groups["all"]["echo"] == 0.5
    assert groups["kind=syslog"]["echo"] == 0.0 and groups["kind=pm"]["echo"] == 1.0


def test_corpus_mixed_records_renamed_and_long_ones_marked():
    items = corpus(6, 2, seed=3)
    assert len(items) == 6 and len({r.id for r, _, _ in items}) == 6
    assert [r.id.startswith("mixed-") for r, _, _ in items] == [False] * 4 + [True] * 2
    lengths = {r.id: (g, len(render_body(r).split())) for r, _, g in items}
    assert lengths[items[5][0].id][0] == "long" and lengths[items[5][0].id][1] > 1000  # mixed index 1 is long
    with pytest.raises(ValueError, match="--mixed"):
        corpus(3, 4, seed=0)


def test_corpus_real_records_last_and_of_real_shapes():
    items = corpus(8, 2, seed=1, real=4)
    assert [r.id.startswith("real-") for r, _, _ in items] == [False] * 4 + [True] * 4
    assert {r.attributes["shape"] for r, _, _ in items[4:]} == {"real-log", "real-ves"}
    with pytest.raises(ValueError, match="--real"):
        corpus(4, 2, seed=0, real=3)


def test_corpus_grounding_cases_last_and_scored_as_their_own_set():
    from worker.benchmarks.quality import record_set

    items = corpus(10, 1, seed=0, real=2, grounding=4)
    assert [record_set(r) for r, _, _ in items] == ["generated"] * 4 + ["real"] * 2 + ["grounding"] * 4
    assert {r.attributes["shape"] for r, _, _ in items[6:]} == {"failed-logins", "auth-failures", "sessions-closed",
                                                                 "operator-note"}
    with pytest.raises(ValueError, match="--grounding"):
        corpus(4, 1, seed=0, real=1, grounding=3)


def test_score_copied_flags_a_worked_examples_problem_or_element():
    record = TelemetryRecord(id="n", kind="text", body="Operator note: RRC setup failures on gNB-0042")
    truth = Facts(entity="gNB-0042", severity="info", details={"problemKeywords": "rrc, setup, fail"})
    assert score(record, truth, "gNB-0042, severity info: ONU 12 on PON port 2 dying gasp received.")["copied"]
    assert score(record, truth, "gNB-0042 and olt-lab-3: RRC setup failures.")["copied"]
    assert not score(record, truth, "gNB-0042, severity info: RRC setup failures after a change.")["copied"]


RESULTS = Path(__file__).resolve().parents[2] / "bench" / "results" / "quality_records.jsonl"


def test_committed_quality_summaries_hold_no_worked_example_value():
    """Nothing from a worked example (its elements, its date and times, its problem's words) may
    appear in a summary of another record: checked on every summary the committed benchmark run produced."""
    rows = [json.loads(line) for line in RESULTS.read_text().splitlines()]
    assert len(rows) >= 40
    for row in rows:
        assert copied_example_value(row["summary"]) is None, (row["id"], row["summary"])


@pytest.mark.slow
def test_bench_quality_tiny_sample_runs_end_to_end(tmp_path, capsys):
    from worker.model import embedded_model_path

    try:
        embedded_model_path()  # not importorskip: the package's __init__ imports what we do not install
    except FileNotFoundError as exc:
        pytest.skip(str(exc))
    out, chart = tmp_path / "records.jsonl", tmp_path / "quality.png"
    rc = main(["bench", "quality", "--n", "4", "--mixed", "0", "--max-new-tokens", "12", "--json",
               "--output", str(out), "--chart", str(chart)])
    result = json.loads(capsys.readouterr().out.strip().splitlines()[-1])
    print("quality on 4 records:", json.dumps(result["groups"]["all"]))  # a figure to read, not to assert
    assert rc == 0 and result["n"] == 4 and result["failures"] == 0
    rows = [json.loads(line) for line in out.read_text().splitlines()]
    assert len(rows) == 4 and all(r["summary"] and r["facts"]["entity"] for r in rows)
    assert chart.stat().st_size > 1000


@pytest.mark.slow
def test_bench_quality_with_fp8_weights_names_them_and_summarises(tmp_path, capsys):
    from worker.model import embedded_model_path

    try:
        embedded_model_path()
    except FileNotFoundError as exc:
        pytest.skip(str(exc))
    out = tmp_path / "records.jsonl"
    rc = main(["bench", "quality", "--n", "3", "--mixed", "0", "--max-new-tokens", "8", "--json", "--dtype", "fp8",
               "--output", str(out)])
    result = json.loads(capsys.readouterr().out.strip().splitlines()[-1])
    assert rc == 0 and result["failures"] == 0 and result["model"].endswith("(fp8)")
    assert all(json.loads(line)["summary"] for line in out.read_text().splitlines())


@pytest.mark.slow
def test_whole_real_log_goes_hierarchical_facts_name_the_host_and_the_check_tells_the_prose():
    """A multi-thousand-line real-shaped log as one record, on the real SmolLM2 with a context too
    small for it: summarised in pieces, then merged. The facts name the host; whether the merged
    prose does (SmolLM2-135M without a worked example often does not) is what `narrative` says."""
    from worker.model import embedded_model_path, load_model
    from worker.settings.budgets import Budgets
    from worker.settings.sections import EngineSettings
    from worker.summarizer.summarizer import Summarizer

    try:
        path = embedded_model_path()
    except FileNotFoundError as exc:
        pytest.skip(str(exc))
    record, truth = next(r for r in generate(8, "real-long", 5) if r[0].attributes["format"] == "bsd")
    assert len(record.body.splitlines()) >= 2000
    summarizer = Summarizer(load_model(path, device=torch.device("cpu")),
                            EngineSettings(max_new_tokens=48, max_context=640, max_record_tokens=0),
                            Budgets(1024, 8, None, {}))
    summarizer.start()
    try:
        (summary,) = list(summarizer.summarize_all([record]))
    finally:
        summarizer.close()
    print("hierarchical summary:", summary.chunks, "chunks:", summary.summary, summary.narrative)
    assert summary.hierarchical and summary.chunks >= 2 and summary.summary
    assert summary.facts.entity == truth.entity
    assert summary.narrative.names_element == entity_named(summary.summary, truth.entity)
