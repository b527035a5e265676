"""What a log message costs the network: a loss of service, a hygiene event, or neither.

A window's problems are ranked by severity and count (`syslog.py`); the vendor's level alone puts
the wrong problem first. Vendors log a routing session's up and down under one notice-level code
(IOS/NX-OS/EOS `%BGP-5-ADJCHANGE`, Junos `BGP_PEER_STATE_CHANGED` at warning), while a port blocked
by BPDU guard is level 2 (`%STP-2-BLOCK_BPDUGUARD`) and a rejected configuration an error. So:

- **loss of service** (`SERVICE`): a BGP / OSPF / IS-IS / EIGRP / LDP / BFD session or adjacency going
  down (a BGP NOTIFICATION sent or received closes the session),
  an interface or link going down (not administratively), a destination unreachable, a reboot,
  reload or crash. Such a problem counts as at least `major` when a vendor's code names it (`coded`).
- **hygiene** (`HYGIENE`): BPDU guard and BPDU protection, storm control, configuration commits and
  configuration errors, recorded CLI commands. Such a problem counts as at most `warning` when
  problems are ranked (its own severity is kept in the facts).
- everything else (`OTHER`) as its level says.

Vendor codes say it where they can (Cisco IOS / IOS-XR / NX-OS and Arista EOS mnemonics, Junos
event tags, Huawei VRP `MODULE/SEV/BRIEF`); words decide otherwise. A state change is read by the
state it goes to (`from Established to Idle`, `new state Idle`, `changed to Down`), so the same code
going up is no loss.
"""

from __future__ import annotations

import re

SERVICE, OTHER, HYGIENE = 0, 1, 2

# Codes whose class the vendor's name already says; the state words still decide up from down.
_HYGIENE_CODES = re.compile(
    r"BPDUGUARD|BPDU_?GUARD|BPDU_PROTECTION|STORM_?CONTROL|%SYS-\d-CONFIG_I\b|VSHD_SYSLOG_CONFIG_I|%PARSER-|"
    r"\bUI_(?:CONFIGURATION_ERROR|COMMIT\w*|CMDLINE_READ_LINE|LOAD_EVENT)\b|/CMDRECORD\b|\bCFG/\d/|"
    r"CONFIG_COMMIT|COMMIT_FAIL")
# A session or adjacency that these codes name has gone down, whatever the words say.
_SESSION_DOWN_CODES = re.compile(
    r"%(?:[A-Z0-9_]+-)?BGP-\d-NOTIFICATION|\bBGP_IO_ERROR\w*|\bbgp_hold_timeout\b|\bRPD_\w*(?:NBRDOWN|ADJDOWN|"
    r"SESSIONDOWN|PEER_DOWN)\b|hwBgpPeerBackwardTransition|OSPF_ADJACENCY_TEARDOWN|NBR_DOWN\w*|\b\w*ADJ_?DOWN\b|"
    r"SESSION_?(?:STATE_)?DOWN", re.IGNORECASE)
# Codes of a session's state changes, both ways: the words decide.
_SESSION_CODES = re.compile(
    r"%(?:[A-Z0-9_]+-)?(?:BGP-\d-ADJCHANGE|OSPF(?:V3)?-\d-(?:ADJCHG|ADJCHANGE|NBRSTATE)|CLNS-\d-ADJCHANGE|"
    r"ISIS-\d-\w*ADJ\w*|LDP-\d-\w*|BFD-\d-\w*|DUAL-\d-NBRCHANGE)|\bBGP_PEER_STATE_CHANGED\b|"
    r"\bRPD_(?:BGP|OSPF|ISIS|LDP)_\w+|"
    r"BGP/\d/\w+|OSPFV?3?/\d/\w+|ISIS/\d/\w+|LDP/\d/\w+|BFD/\d/\w+", re.IGNORECASE)
_LINK_CODES = re.compile(
    r"%(?:PKT_INFRA-)?LINK-\d-UPDOWN|%LINEPROTO-\d-UPDOWN|%ETHPORT-\d-IF_DOWN\w*|%ETH_PORT\w*|"
    r"\bSNMP_TRAP_LINK_(?:DOWN|UP)\b|IFNET/\d/\w+|IFPDT/\d/\w+|PHY/\d/\w+", re.IGNORECASE)
_RESTART_CODES = re.compile(r"%SYS-\d-(?:RELOAD|RESTART)\b|%SYSMGR-\d-\w*RELOAD\w*|\bCHASSISD_\w*RE(?:BOOT|START)\w*|"
                            r"SYSTEM/\d/\w*(?:RESTART|REBOOT)\w*", re.IGNORECASE)

_HYGIENE_WORDS = re.compile(
    r"\bbpdu|storm.?control|\bconfig(?:uration)?\b[^.;]{0,60}\b(?:error|fail\w*|invalid|missing|reject\w*|"
    r"commit\w*)|\bcommit\b[^.;]{0,40}\b(?:error|fail\w*|abort\w*|not confirmed|reject\w*)|configured from|"
    r"recorded command", re.IGNORECASE)
_PROTOCOL = re.compile(r"\b(?:bgp|ospf(?:v3)?|is-?is|clns|ldp|bfd|rsvp|pim|lacp|vpc|eigrp(?:-ipv[46])?|msdp)\b|"
                       r"\badjacen", re.IGNORECASE)
_LINK = re.compile(r"\b(?:interface|link|line protocol|lineproto|ifoperstatus|port-channel)\b", re.IGNORECASE)
_ADMIN_DOWN = re.compile(r"administratively down|admin(?:istrative)?(?:status)? ?down|ifadminstatus down",
                         re.IGNORECASE)
# The state a change goes to: `to Idle`, `new state Idle`, `changed to Down`, `entered the DOWN state`
_TARGET = re.compile(r"\b(?:to|new state|entered the|turned into|went)\s+(?:state\s+)?([A-Za-z0-9-]+)", re.IGNORECASE)
_DOWN_STATES = {"idle", "active", "connect", "down", "init", "attempt", "opensent", "openconfirm", "exstart",
                "exchange", "loading", "dead", "closed", "inactive", "initialize", "failed"}
_UP_STATES = {"established", "full", "up", "2way", "2-way", "two-way", "active-up"}
_SESSION_DOWN_WORDS = re.compile(
    r"\bdown\b|\blost\b|\bloss\b|\bdropped\b|\bteardown\b|\btorn down\b|backward ?transition|\bdead\b|"
    r"\bexpired\b|\bclos(?:e|ed|ing)\b|\bfailed\b|\breset\b|\bflap|\bnotification (?:sent|received)\b",
    re.IGNORECASE)
_LINK_DOWN_WORDS = re.compile(r"\bdown\b|\blink failure\b|\bcarrier lost\b|\bloss of (?:signal|light)\b|\bflap",
                              re.IGNORECASE)
_UNREACHABLE = re.compile(r"\bunreachable\b|no route to host", re.IGNORECASE)
_RESTART = re.compile(
    r"\breboot(?:ing|ed)?\b|\breload(?:ing|ed)?\b|\bsystem (?:re)?start(?:ed|ing)?\b|\b(?:cold|warm) ?start\b|"
    r"\bcrash(?:ed)?\b|kernel panic|watchdog (?:reset|timeout|expired)", re.IGNORECASE)


def _going_down(text: str, words: re.Pattern) -> bool:
    """True when the text says a state goes down: the last state it names going to, else `words`."""
    for m in reversed(list(_TARGET.finditer(text))):
        state = m.group(1).lower()
        if state in _DOWN_STATES:
            return True
        if state in _UP_STATES:
            return False
    return words.search(text) is not None


def coded(app: str | None, text: str) -> bool:
    """True when a vendor's code (not only the words) names the session, link or restart: such a loss
    of service counts as at least major; one read from words (an application's `No route to host` at
    its own WARN level) only ranks first among equals."""
    both = f"{app or ''} {text}"
    return any(p.search(both) for p in (_SESSION_DOWN_CODES, _SESSION_CODES, _LINK_CODES, _RESTART_CODES))


def classify(app: str | None, text: str) -> int:
    """SERVICE, HYGIENE or OTHER for one message (`app`: its program or vendor code)."""
    both = f"{app or ''} {text}"
    spaced = both.replace("_", " ")
    if _HYGIENE_CODES.search(both):
        return HYGIENE
    if _SESSION_DOWN_CODES.search(both) or _RESTART_CODES.search(both):
        return SERVICE
    if _HYGIENE_WORDS.search(spaced):  # `… is down (Error disabled. Reason:BPDUGuard)`: the guard's doing
        return HYGIENE
    if _RESTART.search(spaced) or _UNREACHABLE.search(spaced):
        return SERVICE
    if _ADMIN_DOWN.search(spaced):
        return OTHER
    if (_SESSION_CODES.search(both) or _PROTOCOL.search(spaced)) and _going_down(spaced, _SESSION_DOWN_WORDS):
        return SERVICE
    if (_LINK_CODES.search(both) or _LINK.search(spaced)) and _going_down(spaced, _LINK_DOWN_WORDS):
        return SERVICE
    return OTHER
