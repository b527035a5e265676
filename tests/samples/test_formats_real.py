"""The `real-formats` sample profile: every new format shows up, seeded, and the facts extracted from
it name the sender, the severity, the problem and the first time its truth states."""

from __future__ import annotations

import msgspec
import pytest

from worker.benchmarks.quality import corpus, record_set
from worker.facts import extract_facts
from worker.samples import formats_real, generate


def test_real_formats_profile_covers_every_shape_and_is_seeded():
    pairs = generate(len(formats_real.SHAPES), "real-formats", seed=3)
    assert [r.attributes["format"] for r, _ in pairs] == list(formats_real.SHAPES)
    again = generate(len(formats_real.SHAPES), "real-formats", seed=3)
    assert [msgspec.json.encode(r) for r, _ in pairs] == [msgspec.json.encode(r) for r, _ in again]


@pytest.mark.parametrize("seed", [1, 2])
def test_extract_facts_agrees_with_real_formats_ground_truth(seed):
    for record, truth in generate(2 * len(formats_real.SHAPES), "real-formats", seed=seed):
        f = extract_facts(record)
        assert (f.entity, f.severity, f.first_seen) == (truth.entity, truth.severity, truth.first_seen), (record.id, f)
        for keyword in truth.details["problemKeywords"].split(", "):
            assert keyword in f.problem.lower(), (record.id, keyword, f.problem)


def test_quality_corpus_puts_formats_records_last_in_their_own_set():
    items = corpus(10, 2, seed=1, real=2, formats=3)
    assert [record_set(r) for r, _, _ in items] == ["generated"] * 5 + ["real"] * 2 + ["formats"] * 3
    with pytest.raises(ValueError, match="--formats"):
        corpus(4, 1, seed=0, real=1, formats=3)
