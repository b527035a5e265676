"""Worked examples, one set per record kind: a small model copies the shape of an answer (element
and severity first, then the problem, the count and the time) far better than it follows a
description of it.

Per kind, so a PM report is not answered in a syslog example's words; PM gets a fault and a quiet
report, else the model copies the fault into quiet reports. The elements, problems and times are
invented so that nothing here can pass for a real record's values: elements carry `-lab-`
(no generated or real element does), and they carry no times at all: with a date or time in an
example (in its facts or its answer), the model borrowed it for other records. The time of a
summary comes from its own record's facts only. A test checks that none of `EXAMPLE_VALUES`
appears in the quality benchmark's summaries of other records.

Each answer is the opening the prompt forces (`worker.prompts.opening`, rendered from the example's
facts) and nothing more. With a short continuation after it ("Reported by ponmgr."), the model
continued 11 of 80 summaries in that pattern with wrong values: the example's own app for another
record's, the element as its own reporter (`telesum bench quality --n 80`, 2026-12-01).
"""

from __future__ import annotations

from worker.messages import Facts, TelemetryRecord
from worker.prompts.opening import answer_opening

Example = tuple[TelemetryRecord, Facts, str]


def _example(kind: str, body: str, facts: Facts) -> Example:
    record = TelemetryRecord(id=f"example-{kind}", kind=kind, body=body)
    return record, facts, answer_opening(record, facts)


EXAMPLES: dict[str, tuple[Example, ...]] = {
    "syslog": (_example(
        "syslog",
        "Jul 14 17:42:05 olt-lab-3 ponmgr[311]: ONU 12 on PON port 2 dying gasp received  [repeated 4 times]\n"
        "Jul 14 17:42:30 olt-lab-3 oamd[120]: heartbeat sent to OSS, sequence 52",
        Facts(entity="olt-lab-3", severity="warning", problem="ONU 12 on PON port 2 dying gasp received (4 times)",
              event_count=5,
              details={"app": "ponmgr"})),),
    "trace": (_example(
        "trace",
        "2019-07-14T17:42:05.120Z gNB-lab-1 -> AMF-lab-2 NGAP PagingRequest ue=5521\n"
        "2019-07-14T17:42:06.400Z AMF-lab-2 -> gNB-lab-1 NGAP PagingReject ue=5521 cause=misc:om-intervention  "
        "[repeated 2 times]",
        Facts(entity="gNB-lab-1", severity="minor", problem="paging rejected: O&M intervention (2 rejects)",
              event_count=3,
              details={"elements": "gNB-lab-1, AMF-lab-2"})),),
    "pm": (_example(
        "pm",
        '<managedElement localDn="ManagedElement=eNB-lab-4" userLabel="eNB-lab-4"/>\n'
        '<measType p="1">PAG.DiscardedNbr</measType>\n[... 40 lines omitted ...]',
        Facts(entity="eNB-lab-4", severity="minor", problem="high paging discard count 812 on EUtranCell=2",
              event_count=3,
              details={"granularityPeriod": "900 s", "measuredObjects": "3"})),
        _example(
        "pm",
        '<managedElement localDn="ManagedElement=eNB-lab-5" userLabel="eNB-lab-5"/>\n'
        '<measType p="1">PAG.DiscardedNbr</measType>\n[... 40 lines omitted ...]',
        Facts(entity="eNB-lab-5", severity="info", problem="paging counters as expected",
              event_count=3,
              details={"granularityPeriod": "900 s", "measuredObjects": "3"}))),
    "ves": (_example(
        "ves",
        "event.commonEventHeader.domain: fault\nevent.commonEventHeader.sourceName: gNB-lab-6-CU\n"
        "event.faultFields.specificProblem: Battery backup discharging\nevent.faultFields.eventSeverity: MINOR",
        Facts(entity="gNB-lab-6-CU", severity="minor", problem="Battery backup discharging", details={"domain": "fault"})),),
}
# Free text: a fault, and a note without a problem the parsers know (its answer says what the note
# says; without it the model wrote the fault example's words after a quiet note's opening).
EXAMPLES["text"] = (*EXAMPLES["syslog"], _example(
    "text",
    "Shift note: olt-lab-7 line card 3 LEDs checked on the night round, spare optics put back in the store.",
    Facts(entity="olt-lab-7", severity="info", details={"lines": "1"})))

# What a summary of another record must never contain: the examples' elements, date and times...
EXAMPLE_VALUES = tuple(dict.fromkeys(
    [facts.entity for examples in EXAMPLES.values() for _, facts, _ in examples if facts.entity]
    + ["AMF-lab-2", "2019-07-14", "17:42"]))
# ... nor their problems: the distinctive words of each (a copy is often partial).
EXAMPLE_PROBLEM_MARKS = ("dying gasp", "PON port 2", "O&M intervention", "paging discard", "paging counters",
                         "battery backup", "line card 3", "spare optics", "ponmgr")


def copied_example_value(summary: str) -> str | None:
    """The first worked example's element, time or problem mark that `summary` holds, or None."""
    text = summary.lower()
    return next((v for v in (*EXAMPLE_VALUES, *EXAMPLE_PROBLEM_MARKS) if v.lower() in text), None)
