"""Each failure type states its own dead-letter reason code; renaming a class cannot change it."""

from __future__ import annotations

import typing

import pytest

from worker.dispatch import SequenceTooLong
from worker.engine.errors import ContextTooLong, EngineClosed, OutOfMemory
from worker.summarizer.pieces import RecordTooLong
from worker.messages import InvalidRecord, ReasonCode, failure_reason


@pytest.mark.parametrize(("error", "code"), [
    (SequenceTooLong("1,000,000 tokens > bin"), "too_long"),
    (ContextTooLong("9,000 > 8,192"), "too_long"),
    (RecordTooLong("over the work cap"), "too_long"),
    (OutOfMemory("alone in the smallest chunk"), "out_of_memory"),
    (EngineClosed("closed without drain"), "summarize_failed"),
    (RuntimeError("anything else"), "summarize_failed"),
])
def test_failure_reason_is_the_class_code_and_names_the_error(error, code):
    reason, message = failure_reason(error)
    assert reason == code and reason in typing.get_args(ReasonCode)
    assert message == f"{type(error).__name__}: {error}"


def test_failure_reason_follows_the_class_not_its_name():
    class GpuExhausted(OutOfMemory):
        pass

    class OutOfMemoryLookalike(RuntimeError):  # a foreign class with the old name
        pass

    assert failure_reason(GpuExhausted("x"))[0] == "out_of_memory"
    assert failure_reason(OutOfMemoryLookalike("x"))[0] == "summarize_failed"


def test_failure_reason_of_an_invalid_record_is_its_own_code_and_message():
    assert failure_reason(InvalidRecord("invalid_json", "line 1: not JSON")) == ("invalid_json", "line 1: not JSON")
