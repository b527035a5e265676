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
