"""The `grounding` section of `telesum bench quality`: host-log windows and operator notes of the
shapes whose summaries used to drop the problem or copy a worked example.

Written for this project from the documented message formats, not copied from a data set:
OpenSSH's `sshd` authentication messages (`Failed password for [invalid user] U from A port P ssh2`,
`Invalid user U from A port P`, `Connection closed by A port P [preauth]`), Linux-PAM's `pam_unix`
messages (`authentication failure; logname= uid=0 euid=0 tty=ssh ruser= rhost=A  user=U`,
`session opened for user U by (uid=0)`, `session closed for user U`) in RFC 3164 lines as
`/var/log/auth.log` holds them (`Mmm dd hh:mm:ss host app[pid]: message`), and free-text operator
notes that name an element but hold no problem the parsers know. The truth is what an operator
reading the record would say: its host, its severity, and the words of its problem.
Record i depends only on (seed, i).
"""

from __future__ import annotations

import random

from worker.messages import Facts, TelemetryRecord

SHAPES = ("failed-logins", "auth-failures", "sessions-closed", "operator-note")
_HOSTS = ("bastion-03", "edge-fw-2", "cmts-east-1", "jump01", "dns-cache-7", "olt-north-12", "pgw-sgi-4",
          "mon-collector", "ran-oam-gw2", "srv-backup-5")
_USERS = ("admin", "oracle", "test", "ubnt", "support", "pi", "guest", "ftpuser")
_MONTHS = ("Jan", "Feb", "Mar", "Apr", "May", "Jun", "Jul", "Aug", "Sep", "Oct", "Nov", "Dec")
# (note text with {host} / {cell} / {hh}, problem keywords an operator would read in it)
_NOTES = (
    ("Operator note: cell {cell} on {host} shows RRC setup failures after the {hh}:00 change window.",
     "rrc, setup, fail"),
    ("Shift handover: the fan tray of {host} was replaced at {hh}:15, keep an eye on its temperature overnight.",
     "fan"),
    ("NOC ticket: customers behind {host} report a slow uplink since the firmware upgrade at {hh}:30.",
     "slow, uplink"),
    ("Field team on site at {host}: the battery cabinet door was found open, cabinet closed at {hh}:40.",
     "battery, cabinet"),
    ("Planned work: {host} reboots tonight at {hh}:00 for the licence update, expect a short outage.",
     "reboot"),
    ("Customer call: intermittent packet loss towards the core through {host} since {hh}:10, cause unknown.",
     "packet, loss"),
)


def _ip(rng: random.Random) -> str:
    return ".".join(str(rng.randrange(1, 255)) for _ in range(4))


def _clock(rng: random.Random) -> tuple[str, int, int]:
    """A month-day prefix (`Dec  9`, the day space-padded as RFC 3164 writes it) and a start second."""
    return f"{rng.choice(_MONTHS)} {rng.randrange(1, 29):>2}", rng.randrange(0, 20), rng.randrange(0, 86400 - 3600)


def _lines(rng: random.Random, host: str, messages: list[tuple[str, str]]) -> str:
    """`Mmm dd hh:mm:ss host app[pid]: message` lines, a few seconds apart."""
    day, _, t = _clock(rng)
    out = []
    for app, message in messages:
        t += rng.randrange(0, 4)
        out.append(f"{day} {t // 3600:02d}:{t // 60 % 60:02d}:{t % 60:02d} {host} {app}[{rng.randrange(1000, 32000)}]: "
                   f"{message}")
    return "\n".join(out)


def make(index: int, rng: random.Random) -> tuple[TelemetryRecord, Facts]:
    shape = SHAPES[index % len(SHAPES)]
    host = rng.choice(_HOSTS)
    if shape == "operator-note":
        text, keywords = _NOTES[(index // len(SHAPES)) % len(_NOTES)]
        body = text.format(host=host, cell=f"NRCellDU={rng.randrange(0, 4)}", hh=f"{rng.randrange(0, 24):02d}")
        truth = Facts(entity=host, severity="info", details={"problemKeywords": keywords})
        return TelemetryRecord(id=f"grounding-{index}", kind="text", body=body,
                               attributes={"shape": shape}), truth
    n = rng.randrange(6, 40)
    if shape == "failed-logins":
        messages = []
        for _ in range(n):
            ip, port = _ip(rng), rng.randrange(1024, 65535)
            if rng.random() < 0.5:
                messages.append(("sshd", f"Failed password for root from {ip} port {port} ssh2"))
            else:
                user = rng.choice(_USERS)
                messages += [("sshd", f"Invalid user {user} from {ip} port {port}"),
                             ("sshd", f"Failed password for invalid user {user} from {ip} port {port} ssh2")]
            messages.append(("sshd", f"Connection closed by {ip} port {port} [preauth]"))
        truth = Facts(entity=host, severity="warning", details={"problemKeywords": "fail, password"})
    elif shape == "auth-failures":
        messages = [("sshd", "pam_unix(sshd:auth): authentication failure; logname= uid=0 euid=0 tty=ssh ruser= "
                             f"rhost={_ip(rng)}  user=root") for _ in range(n)]
        truth = Facts(entity=host, severity="warning", details={"problemKeywords": "authentication, fail"})
    else:  # sessions-closed: routine, info
        user = rng.choice(("root", "cyrus", "news", "backup"))
        app = rng.choice(("sshd", "su", "CRON"))
        messages = [(app, f"pam_unix({app.lower()}:session): session closed for user {user}") for _ in range(n)]
        for _ in range(n // 4):  # a few sessions of the window opened in it
            messages.insert(rng.randrange(len(messages)),
                            (app, f"pam_unix({app.lower()}:session): session opened for user {user} by (uid=0)"))
        truth = Facts(entity=host, severity="info", details={"problemKeywords": "session, closed"})
    record = TelemetryRecord(id=f"grounding-{index}", kind="syslog", body=_lines(rng, host, messages),
                             attributes={"shape": shape})
    return record, truth


def generate(n: int, seed: int = 0) -> list[tuple[TelemetryRecord, Facts]]:
    """(record, ground truth) for cases 0..n-1; raises ValueError on a negative n."""
    if n < 0:
        raise ValueError(f"n must be >= 0, got {n}")
    return [make(i, random.Random(f"{seed}:grounding:{i}")) for i in range(n)]
