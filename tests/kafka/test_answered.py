"""answered.settle without a broker: answers past a slower input are published and listed in the
commit's metadata; a log window's answer and its offsets go out together; past the metadata's bound
answers are held back, never listed short."""

from __future__ import annotations

import random

from hypothesis import given, settings
from hypothesis import strategies as st

from worker.kafka.answered import Listed, settle


def _complete(*offsets):
    done = set(offsets)
    return done.__contains__


def test_settle_answers_past_a_slow_input_are_published_and_listed_above_the_offset():
    # 10 is slow; 11, 12 and 14 are answered (staged), 13 is not.
    staged = {"a11": (11,), "a12": (12,), "a14": (14,)}
    s = settle(10, (10, 11, 12, 13, 14), _complete(11, 12, 14), staged)
    assert s.position == 10 and s.listed == {11, 12, 14} and set(s.publish) == {"a11", "a12", "a14"}
    listed = Listed.from_metadata(s.metadata)
    assert listed.start == 10 and [o for o in range(8, 20) if o in listed] == [11, 12, 14]


def test_settle_nothing_past_the_prefix_commits_plain():
    s = settle(5, (), _complete(), {"a4": (4,)})
    assert (s.position, s.listed, s.publish, s.metadata) == (5, frozenset(), ("a4",), "")


def test_settle_a_window_waits_for_every_offset_it_covers_and_holds_its_offsets_back():
    # The window answers 3, 5 and 9; 9 has another part still unanswered: the window waits, and so
    # do 3 and 5 (its offsets), although 3..8 are a complete prefix; 6 and 7 are listed on their own.
    staged = {"w": (3, 5, 9), "a6": (6,), "a7": (7,)}
    s = settle(9, (9,), _complete(), staged)
    assert s.position == 3 and set(s.publish) == {"a6", "a7"}
    assert s.listed == {4, 6, 7, 8}  # 4 and 8 (answered before, or gaps) stay listed: harmless if absent


def test_settle_keeps_listing_what_an_earlier_commit_listed_even_when_not_yet_polled_again():
    # A new owner restored {12, 13} from the commit at 10; it polled 10 and 11 only so far.
    s = settle(None, (10, 11), _complete(11), {"a11": (11,)}, listed_before={12, 13})
    assert s.position == 10 and s.listed == {11, 12, 13}


def test_settle_holds_answers_back_rather_than_list_past_the_metadata_bound():
    rng = random.Random(1)
    pending = list(range(100, 40_000))
    answered = {o for o in pending[1:] if rng.random() < 0.5}  # random gaps: the bitmap does not compress
    staged = {f"a{o}": (o,) for o in answered}
    before = set(sorted(answered)[:50])
    s = settle(100, pending, answered.__contains__, staged, listed_before=before, max_chars=4000)
    assert len(s.metadata) <= 4000 and s.held_back > 0
    assert before <= s.listed                              # what was listed before is never dropped
    assert {f"a{o}" for o in s.listed} == set(s.publish)   # published exactly what is listed
    low = sorted(answered - before)
    assert s.listed - before == set(low[: len(s.listed - before)])  # the lowest ones first


@settings(max_examples=200, deadline=None)
@given(st.data())
def test_settle_never_publishes_an_answer_whose_inputs_are_neither_committed_nor_listed(data):
    n = data.draw(st.integers(1, 30))
    offsets = list(range(n))
    complete = set(data.draw(st.lists(st.sampled_from(offsets), unique=True)))
    prefix = 0
    while prefix < n and prefix in complete:
        prefix += 1
    staged = {}
    for k in range(data.draw(st.integers(0, 10))):
        covers = tuple(sorted(set(data.draw(st.lists(st.sampled_from(offsets), min_size=1, max_size=4)))))
        if all(o in complete for o in covers):
            staged[f"r{k}"] = covers
    s = settle(prefix or None, offsets[prefix:], complete.__contains__, staged)
    assert s is not None
    for rid in s.publish:
        assert all(o < s.position or o in s.listed for o in staged[rid])
    # A listed offset has no answer left behind, and every listed offset is complete.
    for rid, covers in staged.items():
        if rid not in s.publish:
            assert not any(o in s.listed or o < s.position for o in covers)
    assert all(o in complete for o in s.listed if o < n)
    assert s.position <= prefix
