"""The narrative check on records whose facts hold no problem, and the reasons it gives."""

from __future__ import annotations

from worker.facts import extract_facts
from worker.facts.agreement import check_narrative
from worker.messages import Facts, TelemetryRecord

NOTE = TelemetryRecord(id="n", kind="text", body="Operator note: cell NRCellDU=0 on gNB-0042 shows RRC setup "
                                                 "failures after the 14:00 change window.")


def test_no_problem_in_the_facts_is_not_agreement_and_the_check_says_why():
    facts = extract_facts(NOTE)
    assert facts.problem is None  # what makes this record the case
    copied = check_narrative("gNB-0042, severity info: ONU 12 on PON port 2 dying gasp received.", facts, NOTE)
    assert not copied.agrees and not copied.names_problem
    assert copied.issues == ["no problem was recognised in the record, so what the summary says happened is unchecked"]


def test_missing_problem_reason_names_the_problem_the_facts_found():
    record = TelemetryRecord(id="r", kind="syslog", body="x")
    facts = Facts(entity="LabSZ", severity="warning",
                  problem="pam_unix(sshd:auth): authentication failure; uid=0 rhost=61.53.154.93 user=root (11 times)")
    check = check_narrative("LabSZ, severity warning: 61.53.154.93", facts, record)
    assert not check.agrees and not check.names_problem
    assert "does not name the problem the facts found (pam_unix(sshd:auth): authentication failure)" in check.issues
    assert check_narrative("LabSZ, severity warning: authentication failures for root.", facts, record).agrees
