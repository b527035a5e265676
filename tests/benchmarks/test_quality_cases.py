"""The `grounding` section of `telesum bench quality`: deterministic, of every shape, and scored
on summaries rather than on the parsers (the log windows' facts already hold the truth's problem;
the operator notes' facts hold none)."""

from __future__ import annotations

import re

import pytest

from worker.benchmarks import quality_cases
from worker.facts import extract_facts

RFC3164 = re.compile(r"^[A-Z][a-z]{2} [ \d]\d \d{2}:\d{2}:\d{2} (\S+) (sshd|su|CRON)\[\d+\]: \S")


def test_cases_depend_only_on_seed_and_index():
    assert quality_cases.generate(8, seed=2) == quality_cases.generate(8, seed=2)
    assert quality_cases.generate(8, seed=2)[:5] == quality_cases.generate(5, seed=2)
    assert quality_cases.generate(8, seed=2) != quality_cases.generate(8, seed=3)
    with pytest.raises(ValueError, match="n must be"):
        quality_cases.generate(-1)


def test_log_windows_are_rfc3164_lines_whose_facts_hold_the_truth():
    for record, truth in quality_cases.generate(24, seed=1):
        if record.kind != "syslog":
            continue
        lines = record.body.splitlines()
        assert len(lines) >= 6 and all(RFC3164.match(line).group(1) == truth.entity for line in lines)
        facts = extract_facts(record)
        assert (facts.entity, facts.severity) == (truth.entity, truth.severity), record.id
        for keyword in truth.details["problemKeywords"].split(", "):
            assert keyword in facts.problem.lower(), (record.id, keyword, facts.problem)


def test_operator_notes_hold_no_problem_the_parsers_know():
    notes = [(r, t) for r, t in quality_cases.generate(24, seed=0) if r.attributes["shape"] == "operator-note"]
    assert len({r.body.split(":")[0] for r, _ in notes}) == 6  # every note template
    for record, truth in notes:
        assert record.kind == "text" and truth.entity in record.body
        assert extract_facts(record).problem is None, record.body


def test_network_cases_are_deterministic_and_every_shape_comes_round():
    cases = quality_cases.generate_network(16, seed=3)
    assert cases == quality_cases.generate_network(16, seed=3)
    assert {r.attributes["shape"] for r, _ in cases} == set(quality_cases.NETWORK_SHAPES)


def test_network_openings_name_the_truth_without_filler_or_an_unchecked_kpi():
    from worker.benchmarks.quality import score
    from worker.prompts import answer_opening

    for record, truth in quality_cases.generate_network(32, seed=5):
        text = answer_opening(record, extract_facts(record))
        checks = score(record, truth, text)
        assert checks["entity"] and checks["problem"] and checks["severity"] and checks["senders"], (record.id, text)
        assert not checks["placeholder"] and not checks["unchecked_kpi"], (record.id, text)


def test_bench_opening_only_needs_no_model(tmp_path):
    import json

    from worker.cli import main

    out = tmp_path / "q.jsonl"
    assert main(["bench", "quality", "--n", "8", "--network", "8", "--mixed", "0", "--real", "0", "--grounding", "0",
                 "--opening-only", "--output", str(out)]) == 0
    rows = [json.loads(line) for line in out.read_text().splitlines()]
    assert len(rows) == 8 and all(r["set"] == "network" and r["summary"] for r in rows)
