"""Multi-line NGAP/XnAP signalling traces: handovers and sessions, with one kind of failure repeated."""

from __future__ import annotations

import random
from datetime import timedelta

from worker.messages import Facts, TelemetryRecord
from worker.samples.common import gnb, iso_ms, record_start, site_of, truth


def _handover_ok(a, b, amf, ue):
    return [(a, amf, "NGAP", "HandoverRequired", f"ue={ue} target={b} cause=radioNetwork:handover-desirable-for-radio-reasons"),
            (amf, b, "NGAP", "HandoverRequest", f"ue={ue}"),
            (b, amf, "NGAP", "HandoverRequestAcknowledge", f"ue={ue}"),
            (amf, a, "NGAP", "HandoverCommand", f"ue={ue}"),
            (b, amf, "NGAP", "HandoverNotify", f"ue={ue}"),
            (amf, a, "NGAP", "UEContextReleaseCommand", f"ue={ue} cause=radioNetwork:successful-handover")]


def _session_ok(a, b, amf, ue):
    return [(a, amf, "NGAP", "InitialUEMessage", f"ue={ue} estCause=mo-Data"),
            (amf, a, "NGAP", "InitialContextSetupRequest", f"ue={ue}"),
            (a, amf, "NGAP", "InitialContextSetupResponse", f"ue={ue}"),
            (amf, a, "NGAP", "PDUSessionResourceSetupRequest", f"ue={ue} pduSessionId=1 sst=1"),
            (a, amf, "NGAP", "PDUSessionResourceSetupResponse", f"ue={ue} pduSessionId=1"),
            (a, amf, "NGAP", "UEContextReleaseRequest", f"ue={ue} cause=radioNetwork:user-inactivity")]


# name -> (lines(a, b, amf, ue), index of the element at fault among (a, b), problem, keywords)
INCIDENTS = {
    "ngHandoverFailure": (lambda a, b, amf, ue: [
        (a, amf, "NGAP", "HandoverRequired", f"ue={ue} target={b} cause=radioNetwork:handover-desirable-for-radio-reasons"),
        (amf, b, "NGAP", "HandoverRequest", f"ue={ue}"),
        (b, amf, "NGAP", "HandoverFailure", f"ue={ue} cause=radioNetwork:no-radio-resources-available-in-target-cell"),
        (amf, a, "NGAP", "HandoverPreparationFailure", f"ue={ue} cause=radioNetwork:no-radio-resources-available-in-target-cell"),
    ], 1, "handover failure: no radio resources available in target cell", ["handover", "fail"]),
    "xnHandoverFailure": (lambda a, b, amf, ue: [
        (a, b, "XnAP", "HandoverRequest", f"ue={ue} targetCell={b}"),
        (b, a, "XnAP", "HandoverPreparationFailure", f"ue={ue} cause=radioNetwork:cell-not-available"),
    ], 1, "Xn handover preparation failure: target cell not available", ["handover", "fail"]),
    "callDrop": (lambda a, b, amf, ue: [
        (a, amf, "NGAP", "UEContextReleaseRequest", f"ue={ue} cause=radioNetwork:radio-connection-with-ue-lost"),
        (amf, a, "NGAP", "UEContextReleaseCommand", f"ue={ue} cause=radioNetwork:radio-connection-with-ue-lost"),
    ], 0, "call dropped: radio connection with UE lost", ["radio", "lost"]),
    "contextSetupFailure": (lambda a, b, amf, ue: [
        (a, amf, "NGAP", "InitialUEMessage", f"ue={ue} estCause=mo-Data"),
        (amf, a, "NGAP", "InitialContextSetupRequest", f"ue={ue}"),
        (a, amf, "NGAP", "InitialContextSetupFailure", f"ue={ue} cause=radioNetwork:radio-resources-not-available"),
    ], 0, "initial context setup failure: radio resources not available", ["setup", "fail"]),
}


def make(index: int, target_words: int, rng: random.Random) -> tuple[TelemetryRecord, Facts]:
    """A trace of about `target_words` words (never more); 85 % hold 1-3 incidents of one failure."""
    a, b = gnb(rng), gnb(rng)
    amf = f"AMF-{rng.randrange(1, 9):02d}"
    incident = rng.choice(list(INCIDENTS)) if rng.random() < 0.85 else None
    pending = [INCIDENTS[incident][0](a, b, amf, rng.randrange(1, 1 << 24))
               for _ in range(rng.randrange(1, 4) if incident else 0)]
    while len(pending) > 1 and sum(map(_cost, pending)) > target_words:
        pending.pop()
    owed = sum(map(_cost, pending))  # words reserved for incidents not yet written
    when = record_start(index, rng)
    lines: list[str] = []
    words, times = 0, []
    queue: list[tuple] = []
    in_incident = False
    while True:
        if not queue:
            if pending and (rng.random() < 0.4 or words + owed + 12 > target_words):
                queue, in_incident = pending.pop(0), True
                owed -= _cost(queue)
            else:
                queue, in_incident = rng.choice((_handover_ok, _session_ok))(*rng.sample([a, b], 2), amf,
                                                                          rng.randrange(1, 1 << 24)), False
        if not in_incident and lines and words + _cost([queue[0]]) + owed > target_words:
            if not pending and lines:
                break
            queue = []  # cut the routine procedure short: the incident must fit
            continue
        src, dst, proto, name, rest = queue.pop(0)
        line = f"{iso_ms(when)} {src} -> {dst} {proto} {name} {rest}"
        lines.append(line)
        words += len(line.split())
        times.append(when)
        when += timedelta(milliseconds=rng.randrange(2, 400))
    body = "\n".join(lines)
    record = TelemetryRecord(id=f"trace-{index:06d}", kind="trace", body=body, source=site_of(a),
                             timestamp=iso_ms(times[0]), attributes={"format": "ngap-trace"})
    if incident:
        _, at_fault, problem, keywords = INCIDENTS[incident]
        facts = truth((a, b)[at_fault], "major", problem, keywords, min(times), max(times), len(lines))
    else:
        facts = truth(_busiest(lines), "info", f"no failures in {len(lines)} signalling events",
                      ["no failure"], min(times), max(times), len(lines))
    return record, facts


def _cost(procedure: list[tuple]) -> int:
    """Words the lines of a procedure take: time, src, ->, dst, protocol, name and the rest."""
    return sum(6 + len(rest.split()) for *_, rest in procedure)


def _busiest(lines: list[str]) -> str:
    counts: dict[str, int] = {}
    for line in lines:
        src = line.split()[1]
        counts[src] = counts.get(src, 0) + 1
    top = max(counts.values())
    return next(s for s in counts if counts[s] == top)
