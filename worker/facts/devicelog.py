"""Network gear syslog: lines that carry a vendor message code, read from the vendors' documented
line formats (not from samples):

- Cisco IOS / IOS-XE: `[<PRI>][SEQ: ][HOST: ][*|.]Mmm dd [yyyy] hh:mm:ss[.mmm][ TZ]: %FAC-SEV-MNEMONIC: text`
  (`service sequence-numbers`, `logging origin-id hostname`; `*` marks a clock never set, `.` one
  not in sync; `show-timezone` appends UTC, CET, PST, ...; `service timestamps log uptime` writes
  `1w2d:` or `00:02:15:` instead of a time: no time then)
- Cisco IOS-XR: `[<PRI>SEQ: ][HOST ]NODE:[yyyy ]Mmm dd hh:mm:ss[.mmm][ TZ] : proc[pid]: %FAC-SUB-SEV-MNEM : text`
  (NODE is a card such as `RP/0/RSP0/CPU0`, never the element)
- Cisco NX-OS: `[<PRI>: ]yyyy Mmm dd hh:mm:ss[ TZ][ HOST] %FAC-SEV-MNEMONIC: text`
- Cisco ASA / FTD: `[<PRI>]Mmm dd yyyy hh:mm:ss[ HOST][ :] %ASA-SEV-NNNNNN: text`
- Arista EOS: `Mmm dd hh:mm:ss HOST Agent: %FAC-SEV-MNEMONIC: text`
- Huawei VRP / H3C Comware: `[<PRI>]TIME HOST %%01MODULE/SEV/BRIEF(l)[n]:text` (TIME as
  `Mmm dd yyyy hh:mm:ss[+08:00]`, `yyyy-mm-dd hh:mm:ss`, or H3C `Mmm dd hh:mm:ss:mmm yyyy`);
  Huawei traps `#TIME HOST MODULE/SEV/BRIEF:text` and H3C console lines `%TIME HOST MODULE/SEV/BRIEF:`
  carry the code without `%%`

Relays put their own receive time and the sender's address in front; the last time before the code
is the device's, an earlier one with a year supplies the year. The element is the device's own host
name (after its time, or its origin-id before it), else the address the relay recorded; never a
card, a peer or an interface named in the text. The code's digit is the line's severity.
"""

from __future__ import annotations

import re
from datetime import datetime, timezone

from worker.facts.common import parse_iso
from worker.facts.levels import PRI_SEVERITY
from worker.facts.logline import MONTH_NAMES, MONTHS, ZONE_MINUTES, LogLine, with_year, zone_of

_CODE = re.compile(
    r"%%\s?\d{2}\s?(?P<hw>[A-Z][A-Z0-9_-]*/(?P<hwsev>[0-7])/[A-Za-z0-9_]+)(?:\([a-z]\))?(?:\[\d+\])?\s*:\s*|"
    r"(?P<cisco>%(?:[A-Z][A-Z0-9_]*-){1,2}(?P<sev>[0-7])-[A-Z0-9_]+)\s?:\s*")
# Huawei traps (`#` first) and H3C console lines write the code without `%%`.
_BARE_CODE = re.compile(r"(?<![\w/%])(?P<hw>[A-Z][A-Z0-9_-]*/(?P<hwsev>[0-7])/[A-Za-z0-9_]+)(?:\([a-z]\))?(?:\[\d+\])?\s*:\s*")
_ZONE_NAMES = "|".join(sorted(ZONE_MINUTES, key=len, reverse=True))
_ZONE = r"(?: ?(?P<zone>(?:(?:" + _ZONE_NAMES + r")(?:[+-]\d{1,2}(?::?\d{2})?)?|[+-]\d{2}:?\d{2})(?: DST)?))?"
_TIME = re.compile(
    r"(?<!\w)[*.]?(?:(?P<y1>\d{4}) (?P<m1>" + MONTH_NAMES + r") +(?P<d1>\d{1,2})|(?P<m2>" + MONTH_NAMES +
    r") +(?P<d2>\d{1,2}),?(?: (?P<y2>\d{4}))?) (?P<h>\d{2}):(?P<mi>\d{2}):(?P<s>\d{2})(?:[.:](?P<f>\d{1,6}))?"
    r"(?: (?P<y3>\d{4})(?= |$))?" + _ZONE + r"(?=[\s:]|$)|"
    r"(?P<iso>\d{4}-\d{2}-\d{2}[T ]\d{2}:\d{2}:\d{2}(?:[.,]\d{1,9})?(?:Z|[+-]\d{2}:?\d{2})?)(?=[\s:]|$)")
_PRI = re.compile(r"<(\d{1,3})>")
# Leading lookbehinds and possessive quantifiers: linear searches (issue 27), the same full matches.
_SEQUENCE = re.compile(r"\d+:?|:")
_UPTIME = re.compile(r"(?<!\d)[*.]?(?:\d++[ywdh]\d++[ywdh]|\d{1,2}:\d{2}:\d{2}(?:\.\d+)?):?")  # `1w2d:`, `00:02:15.123:`
_CARD = re.compile(r"(?<![\w-])[\w-]*+/[\w/-]*+:?")  # RP/0/RSP0/CPU0: a line card or route processor
_ADDRESS = re.compile(r"(?:\d{1,3}\.){3}\d{1,3}|[0-9a-fA-F]{0,4}(?::[0-9a-fA-F]{0,4}){2,7}")
_PROCESS = re.compile(r"(?<![\w.-])[\w.-]++\[\d++\]:?|(?<![A-Za-z])[A-Z][A-Za-z]++:")  # XR `ifmgr[215]:`, EOS `Ebra:`
_HOST = re.compile(r"[^\W_][\w.@-]*")


def _device_time(m: re.Match, reference: datetime) -> tuple[datetime | None, bool]:
    if m.group("iso"):
        when = parse_iso(m.group("iso").replace(",", "."))
        if when is not None and when.tzinfo is None:
            when = when.replace(tzinfo=timezone.utc)
        return when, when is not None
    month = MONTHS[m.group("m1") or m.group("m2")]
    day = int(m.group("d1") or m.group("d2"))
    hms = (int(m.group("h")), int(m.group("mi")), int(m.group("s")))
    micro = int((m.group("f") or "0").ljust(6, "0")[:6])
    tz = zone_of(m.group("zone")) or timezone.utc
    year = m.group("y1") or m.group("y2") or m.group("y3")
    if year:
        try:
            return datetime(int(year), month, day, *hms, micro, tz), True
        except ValueError:
            return None, False
    return with_year(month, day, hms, micro, tz, reference), False


def _names(text: str) -> list[str]:
    """Host-name candidates among the tokens of `text` (sequence numbers, cards, PRIs dropped)."""
    out = []
    for token in text.split():
        token = _PRI.sub("", token)
        if not token or _SEQUENCE.fullmatch(token) or _CARD.fullmatch(token) or _UPTIME.fullmatch(token):
            continue
        name = token.rstrip(":")
        if _HOST.fullmatch(name) and not name.isdigit():
            out.append(name)
    return out


def parse(line: str, reference: datetime) -> LogLine | None:
    """A line carrying a vendor message code as a LogLine, or None when it carries none."""
    code = _CODE.search(line) if "%" in line else None
    if code is None:
        code = _BARE_CODE.search(line) if "/" in line else None
        # without `%%` a code must follow a time: `MOD/3/BRIEF:` could be text otherwise
        if code is None or not _TIME.search(line, 0, code.start()):
            return None
    head, text = line[: code.start()], line[code.end():]
    pri_match = _PRI.search(head)
    pri = int(pri_match.group(1)) if pri_match and int(pri_match.group(1)) <= 191 else None
    times = list(_TIME.finditer(head))
    when, year_known, before, after = None, False, head, ""
    if times:
        last = times[-1]
        known = [t for t in times[:-1] if t.group("iso") or t.group("y1") or t.group("y2") or t.group("y3")]
        if known:  # a relay's receive time with a year dates the device's time without one
            reference = _device_time(known[-1], reference)[0] or reference
        when, year_known = _device_time(last, reference)
        before, after = head[: last.start()], head[last.end():]
        for t in times[:-1]:
            before = before.replace(t.group(0), " ")
    after_tokens = [t for t in after.replace(" : ", " ").split() if t != ":"]
    host = None
    if after_tokens and not _PROCESS.fullmatch(after_tokens[0]):
        candidate = after_tokens[0].rstrip(":")
        host = candidate if _HOST.fullmatch(candidate) and not candidate.isdigit() else None
    if host is None:
        names = _names(before)
        named = [n for n in names if not _ADDRESS.fullmatch(n)]
        host = (named or names or [None])[-1]
    app = code.group("hw") or code.group("cisco")
    severity = PRI_SEVERITY[int(code.group("hwsev") or code.group("sev"))]
    shape = "huawei" if code.group("hw") else ("asa" if app.startswith(("%ASA-", "%FTD-")) else "cisco")
    return LogLine(when, year_known or when is None, host, app, None, pri, severity, text.strip(), shape)
