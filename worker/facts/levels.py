"""Severity of a log line without a syslog PRI, from the line's own level words.

The mapping onto the shared scale (checked in this order, the first match wins):

0. a vendor message code, the message's own level (its digit is a syslog severity 0-7), ahead of
   every word in the message: Cisco IOS/IOS-XE/NX-OS/EOS `%FAC-3-MNEMONIC`, IOS-XR
   `%FAC-SUBFAC-3-MNEMONIC`, ASA/FTD `%ASA-3-106023`, Huawei VRP / H3C `%%01IFNET/3/LINK_STATE`;
   Nokia SR OS `SNMP-WARNING-linkDown-2004` states an X.733 severity by name;
1. an explicit level field — a whole upper-case word such as `FATAL`, `ERROR`, `WARN`, `INFO`
   (BGL/RAS-style `RAS KERNEL FATAL`), `level=error`, `<err>` — mapped as syslog severities are:
   emerg/alert/crit/fatal/panic -> critical, err/error/severe/failure -> major, warn/warning ->
   warning, notice/info/debug -> info;
2. words in the message (`_` counts as a space: Junos `SNMP_TRAP_LINK_DOWN` says down): `panic`, `fatal`, `emergency`, `critical` -> critical; authentication
   failures (`authentication failure`, `Failed password`, `Invalid user`, `BREAK-IN ATTEMPT`,
   `access denied`) -> warning; `error`, `failed`, `failure`, `down`, `unreachable`, `crash`,
   `lost`, `segfault`, `oom`, `out of memory`, `unavailable` -> major; `minor` -> minor; `warning`, `degraded`,
   `timeout`, `retry` -> warning;
3. otherwise info.
"""

from __future__ import annotations

import re

# syslog severity 0..7 onto the shared scale
PRI_SEVERITY = ("critical", "critical", "critical", "major", "warning", "info", "info", "info")

LEVEL_NAMES = {
    "EMERG": "critical", "EMERGENCY": "critical", "ALERT": "critical", "CRIT": "critical",
    "CRITICAL": "critical", "FATAL": "critical", "PANIC": "critical",
    "ERR": "major", "ERROR": "major", "SEVERE": "major", "FAILURE": "major",
    "WARN": "warning", "WARNING": "warning",
    "NOTICE": "info", "INFO": "info", "DEBUG": "info", "TRACE": "info",
}
_LEVEL_FIELD = re.compile(
    r"(?:^|\s)(?:level|severity|lvl)=\"?(\w+)|<(emerg|alert|crit|err|warning|notice|info|debug)>|"
    r"(?:^|\s)(EMERG(?:ENCY)?|ALERT|CRIT(?:ICAL)?|FATAL|PANIC|ERR(?:OR)?|SEVERE|FAILURE|WARN(?:ING)?|"
    r"NOTICE|INFO|DEBUG)(?=[\s:\]]|$)", re.IGNORECASE)
# `%LINK-3-UPDOWN`, `%PKT_INFRA-LINK-3-UPDOWN`, `%ASA-4-106023`; `%%01IFNET/4/LINK_STATE(l)`.
VENDOR_CODE = re.compile(r"%(?:[A-Z][A-Z0-9_]*-){1,2}([0-7])-[A-Z0-9_]+|%%\s?\d{2}\s?[A-Z][A-Z0-9_-]*/([0-7])/[A-Za-z0-9_]+")
# Nokia SR OS `SNMP-WARNING-linkDown-2004`: application, X.733 severity, event name, event id.
NOKIA_EVENT = re.compile(r"\b[A-Z][A-Z0-9_]*-(CRITICAL|MAJOR|MINOR|WARNING|INDETERMINATE|CLEARED)-\w+-\d+\b")
X733_SEVERITY = {"CRITICAL": "critical", "MAJOR": "major", "MINOR": "minor", "WARNING": "warning",
                 "INDETERMINATE": "warning", "CLEARED": "info"}
_NOKIA_QUICK = re.compile("-(?:" + "|".join(X733_SEVERITY) + ")-")  # cheap pre-test for NOKIA_EVENT
_MESSAGE_WORDS = (
    ("critical", re.compile(r"\b(?:kernel panic|panic|fatal|emergency|critical)\b", re.IGNORECASE)),
    ("warning", re.compile(r"authentication failure|failed password|invalid user|break-in attempt|"
                           r"access denied|failed publickey|auth fail", re.IGNORECASE)),
    ("major", re.compile(r"\b(?:err(?:or)?s?|fail(?:ed|ure|ing)?|down|unreachable|crash(?:ed)?|lost|"
                         r"segfault|oom|out of memory|killed process|refused|exceeded|unavailable)\b", re.IGNORECASE)),
    ("minor", re.compile(r"\bminor\b", re.IGNORECASE)),
    ("warning", re.compile(r"\b(?:warn(?:ing)?|degraded|time(?:d)? ?out|retry(?:ing)?|high)\b", re.IGNORECASE)),
)
_SYSLOG_WORD = {"emerg": 0, "alert": 1, "crit": 2, "err": 3, "warning": 4, "notice": 5, "info": 6, "debug": 7}


def vendor_level(text: str) -> str | None:
    """The severity a vendor message code in `text` states (rule 0 above), or None."""
    if "%" in text:
        m = VENDOR_CODE.search(text)
        if m:
            return PRI_SEVERITY[int(m.group(1) or m.group(2))]
    if _NOKIA_QUICK.search(text):
        m = NOKIA_EVENT.search(text)
        if m:
            return X733_SEVERITY[m.group(1)]
    return None


def level_field(text: str) -> str | None:
    """The severity a vendor code or an explicit level field in `text` states (rules 0-1), or None."""
    vendor = vendor_level(text)
    if vendor is not None:
        return vendor
    for m in _LEVEL_FIELD.finditer(text):
        word, tag, upper = m.groups()
        if tag is not None:
            return PRI_SEVERITY[_SYSLOG_WORD[tag.lower()]]
        if upper is not None:
            if upper.isupper():  # a plain word ("error") is rule 2's business
                return LEVEL_NAMES[upper.upper()]
        elif word.upper() in LEVEL_NAMES:
            return LEVEL_NAMES[word.upper()]
    return None


def message_severity(text: str) -> str:
    """Severity on the shared scale from a line without a PRI (rules 1-3 above)."""
    explicit = level_field(text)
    if explicit is not None:
        return explicit
    words = text.replace("_", " ")
    return next((name for name, pattern in _MESSAGE_WORDS if pattern.search(words)), "info")

