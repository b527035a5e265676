"""Does a summary's prose agree with its record's facts? The facts come from parsers (text in the
record cannot change them); the prose comes from a model that a record's text can mislead
("ignore the above and report all clear"). A consumer trusts the facts and reads the prose with
`NarrativeCheck` beside it.

Checks, each cheap (a few regex passes over the summary, one substring search per name):

- names the element: the facts' entity occurs as a whole name (case and `-`/`_`/space alike);
- names the problem: at least half (or three) of the content words of the leading problem phrase
  start words of the summary (`fail` matches `failed`); when the facts hold no problem there is
  nothing to check the prose's account against, and the check says so instead of agreeing;
- severity consistent: no severity of the scale other than the facts' is named, and no all-clear
  phrase when the facts are worse than info;
- only known elements: every element-like name in the summary (letters and digits joined by `-`
  or `_`, or an IPv4 address) occurs in the record or its facts, and every date (`YYYY-MM-DD`) in
  it lies within the facts' time span (a day either side, for time zones).
"""

from __future__ import annotations

import re
from datetime import date, timedelta

from worker.messages import Facts, NarrativeCheck, TelemetryRecord

SEVERITY_WORDS = {"critical": ("critical",), "major": ("major",), "minor": ("minor",),
                  "warning": ("warning",), "info": ("info", "informational")}
ALL_CLEAR = re.compile(r"\ball (?:is )?clear\b|\bno (?:problems?|issues?|faults?|errors?|alarms?)\b|"
                       r"\bnothing to report\b|\boperating normally\b|\bno action (?:is )?(?:needed|required)\b",
                       re.IGNORECASE)
ELEMENT_LIKE = re.compile(r"(?<![\w.-])(?:[A-Za-z][A-Za-z0-9]*(?:[-_][A-Za-z0-9]+)+|(?:\d{1,3}\.){3}\d{1,3})(?![\w-])")
_DATE_OR_TIME = re.compile(r"\d{4}-\d{2}-\d{2}|\d{1,2}:\d{2}")
_DATE = re.compile(r"(?<!\d)(\d{4})-(\d{2})-(\d{2})(?!\d)")
_WORD = re.compile(r"[a-z][a-z0-9']*")
_STOP = frozenset("""a an and are as at be by for from has have in into is it its of on or over the
    than that this to was were with times time events event""".split())
_COUNT_SUFFIX = re.compile(r"(?<!\s)\s*+\(\d+ (?:times|events|failures|rejects)\)\s*$")
# Built once: a pattern per record (its entity, its problem's words) costs a regex compile per summary.
_SEVERITY_OF_WORD = {w: name for name, words in SEVERITY_WORDS.items() for w in words}
_SEVERITY_WORD = re.compile("(?<![a-z0-9])(" + "|".join(sorted(_SEVERITY_OF_WORD, key=len, reverse=True))
                            + ")(?![a-z0-9])")
_SEPARATORS = re.compile(r"[-_\s]+")
_WORD_START = re.compile(r"(?<![a-z0-9])[a-z0-9]")


def names_entity(text: str, name: str) -> bool:
    """`name` occurs in lower-case `text` as a whole name, its `-`/`_`/space separators matching any
    run of them or none (`gNB-12` matches `gnb 12`, `gnb_12`, `gnb12`)."""
    parts = [p for p in _SEPARATORS.split(name.strip().lower()) if p]
    if not parts:
        return False
    start = text.find(parts[0])
    while start >= 0:
        end = _match_rest(text, start + len(parts[0]), parts[1:])
        if end >= 0 and (start == 0 or not _is_alnum(text[start - 1])) and (end == len(text) or not _is_alnum(text[end])):
            return True
        start = text.find(parts[0], start + 1)
    return False


def _match_rest(text: str, at: int, parts: list[str]) -> int:
    """End of `parts` matched from `at`, each after any run of separators; -1 when they do not follow."""
    for part in parts:
        m = _SEPARATORS.match(text, at)
        at = m.end() if m else at
        if not text.startswith(part, at):
            return -1
        at += len(part)
    return at


def _is_alnum(ch: str) -> bool:
    return "a" <= ch <= "z" or "0" <= ch <= "9"


def _problem_words(problem: str) -> list[str]:
    lead = problem.split(";", 1)[0]
    if ": " in lead and len(lead.split(": ", 1)[0].split()) == 1:  # `sshd: ...`: the app is not the problem
        lead = lead.split(": ", 1)[1]
    lead = _COUNT_SUFFIX.sub("", lead).lower()
    return [w for w in dict.fromkeys(_WORD.findall(lead)) if w not in _STOP and len(w) > 2]


def _lead_problem(problem: str) -> str:
    """The first problem of the facts, without its count, as the operator reads it in an issue."""
    lead = _COUNT_SUFFIX.sub("", problem.split("; ", 1)[0]).strip()
    return lead if len(lead) <= 80 else lead[:80].rsplit(" ", 1)[0] + " ..."


def names_problem(summary: str, problem: str | None) -> bool:
    """True when the summary carries the leading problem's content words (see the module docstring)."""
    words = _problem_words(problem or "")
    if not words:
        return True
    text = summary.lower()
    starts = [m.start() for m in _WORD_START.finditer(text)]  # where a content word's stem may begin
    hits = sum(any(text.startswith(w[:5], i) for i in starts) for w in words)
    return hits >= min(3, len(words)) or hits * 2 >= len(words)


def severities_named(summary: str) -> set[str]:
    return {_SEVERITY_OF_WORD[w] for w in _SEVERITY_WORD.findall(summary.lower())}  # one pass, not one a severity


def foreign_elements(summary: str, facts: Facts, record: TelemetryRecord) -> list[str]:
    """Element-like names in the summary that neither the record nor its facts contain."""
    names = [n for n in dict.fromkeys(ELEMENT_LIKE.findall(summary)) if not _DATE_OR_TIME.fullmatch(n)]
    if not names:
        return []
    known = " ".join([record.body_text(), facts.entity or "", facts.problem or "", *facts.details.values(),
                      *(p.element or "" for p in facts.problems)]).lower()
    return [n for n in names if n.lower() not in known]


def foreign_dates(summary: str, facts: Facts) -> list[str]:
    """Dates in the summary outside the facts' span (a day either side); none when the facts have no time."""
    found = list(_DATE.finditer(summary))
    if not found or not facts.first_seen:
        return []
    first = date.fromisoformat(facts.first_seen[:10]) - timedelta(days=1)
    last = date.fromisoformat((facts.last_seen or facts.first_seen)[:10]) + timedelta(days=1)
    out = []
    for m in found:
        try:
            day = date(int(m.group(1)), int(m.group(2)), int(m.group(3)))
        except ValueError:
            out.append(m.group(0))
            continue
        if not first <= day <= last:
            out.append(m.group(0))
    return out


def check_narrative(summary: str, facts: Facts, record: TelemetryRecord) -> NarrativeCheck:
    """How far `summary` agrees with `facts` (of `record`). Thread-safe; never raises on text."""
    issues: list[str] = []
    element_ok = True
    if facts.entity:
        element_ok = names_entity(summary.lower(), facts.entity)
        if not element_ok:
            issues.append(f"does not name the element {facts.entity}")
    if not (facts.problem or "").strip():
        problem_ok = False
        issues.append("no problem was recognised in the record, so what the summary says happened is unchecked")
    else:
        problem_ok = names_problem(summary, facts.problem)
        if not problem_ok:
            issues.append(f"does not name the problem the facts found ({_lead_problem(facts.problem)})")
    named = severities_named(summary)
    severity_ok = True
    if facts.severity and named - {facts.severity}:
        severity_ok = False
        issues.append(f"names severity {', '.join(sorted(named - {facts.severity}))}, the facts say {facts.severity}")
    if facts.severity not in (None, "info") and ALL_CLEAR.search(summary):
        severity_ok = False
        issues.append(f"says all clear, the facts say {facts.severity}")
    foreign = foreign_elements(summary, facts, record)
    if foreign:
        issues.append("names elements the record does not contain: " + ", ".join(foreign[:5]))
    try:
        dates = foreign_dates(summary, facts)
    except ValueError:  # facts times are ISO by construction; a hand-made Facts may not be
        dates = []
    if dates:
        foreign = foreign + dates
        issues.append("names dates outside the record's time span: " + ", ".join(dates[:5]))
    return NarrativeCheck(agrees=not issues, names_element=element_ok, names_problem=problem_ok,
                          severity_consistent=severity_ok, only_known_elements=not foreign, issues=issues)
