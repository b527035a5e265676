"""What `telesum bench faults` produces: realistic records or raw log lines, the hostile inputs a worker
must dead-letter, and one valid record with a huge body, in the order they are sent."""

from __future__ import annotations

import random

import msgspec

from worker.benchmarks.faults_plan import Plan
from worker.messages import TelemetryRecord


def hostile_values() -> list[tuple[bytes, list[tuple[str, bytes]]]]:
    """(value, headers) of ten inputs a worker must dead-letter, never crash on."""
    deep = b'{"id": "deep", "kind": "ves", "body": ' + b'{"a": ' * 300 + b"1" + b"}" * 300 + b"}"
    return [(b"{not json", []), (b'{"id": 7, "kind": "text", "body": "x"}', []),
            (b'{"id": "e", "kind": "text", "body": ""}', []), (bytes(range(256)) * 4, []),
            (b'{"id": "u", "kind": "text", "body": "\xff\xfe bad"}', []), (deep, []),
            (b'{"id": "k", "kind": "nonsense", "body": "x"}', []), (b"", []),
            (msgspec.json.encode(TelemetryRecord(id="ctl", kind="text", body="\x00\x01\x1b[31m\x07")), []),
            (b"\x93\x01\x02", [("content-type", b"application/msgpack")])]


_WORDS = ("link down port fan tray sync lost ptp grandmaster high temperature rrc setup failure cause s1 "
          "flap mme power supply degraded slot radio unit cpri alarm cleared raised major minor critical "
          "handover x2 xn timeout retry reset board restart license expired backhaul jitter loss").split()


def huge_record(num_bytes: int, seed: int = 0) -> bytes:
    """A valid syslog record whose body is about `num_bytes` long. Its lines differ in words, not
    only in numbers, so collapsing repeats leaves most of them (a worst case for the work)."""
    rng = random.Random(seed)
    lines, size, i = [], 0, 0
    while size < num_bytes:
        words = " ".join(rng.choice(_WORDS) for _ in range(6))
        line = (f"<{rng.choice([11, 12, 13, 14])}>1 2026-12-01T{i // 3600 % 24:02d}:{i // 60 % 60:02d}:"
                f"{i % 60:02d}Z gnb-{rng.choice(_WORDS)} ran - - - {words}")
        lines.append(line)
        size += len(line) + 1
        i += 1
    return msgspec.json.encode(TelemetryRecord(id="huge", kind="syslog", body="\n".join(lines), source="gnb"))


_HOSTS = tuple(f"gnb-du-{i:04d}" for i in range(12))
_APPS = ("ptp4l", "du_app", "kernel", "sshd", "rrc")


def log_lines(count: int, seed: int = 0) -> list[tuple[bytes, bytes]]:
    """(line, key) of `count` raw syslog lines (rsyslog's ISO-stamped template and RFC 5424) from a
    dozen hosts, keyed by host as a producer keyed by hostname sends them."""
    rng = random.Random(seed)
    lines = []
    for i in range(count):
        host, app = rng.choice(_HOSTS), rng.choice(_APPS)
        words = " ".join(rng.choice(_WORDS) for _ in range(5))
        stamp = f"2026-12-01T14:{i // 60 % 60:02d}:{i % 60:02d}.{rng.randrange(10**6):06d}+00:00"
        if i % 3:
            line = f"{stamp} {host} {app}[{rng.randrange(100, 9999)}]: {words}"
        else:
            line = f"<{rng.choice([11, 12, 13, 14])}>1 {stamp} {host} {app} - - - {words}"
        lines.append((line.encode(), host.encode()))
    return lines


def inputs(plan: Plan, with_huge: bool) -> list[tuple[bytes, list, bytes]]:
    """(value, headers, key) of every input, in the order they are produced. In the hostile stream a
    value may be a `faults_hostile.Bomb`: records the producer compresses into one batch."""
    from worker.samples import iter_generate

    def records(count: int) -> list:
        return [(msgspec.json.encode(r), [], f"r{i}".encode())
                for i, (r, _) in enumerate(iter_generate(count, "short", plan.seed))]

    if plan.stream == "log-lines":
        realistic = [(line, [], key) for line, key in log_lines(plan.records, plan.seed)]
    elif plan.stream == "hostile":  # records and log lines interleaved: windows are open all along
        lines = [(line, [], key) for line, key in log_lines(plan.records - plan.records // 2, plan.seed)]
        realistic = [x for pair in zip(lines, records(plan.records // 2)) for x in pair] + lines[plan.records // 2:]
    else:
        realistic = records(plan.records)
    hostile = [(value, headers, f"h{i}".encode()) for i, (value, headers) in enumerate(hostile_values())]
    if plan.stream == "hostile":
        from worker.benchmarks.faults_hostile import CI, FULL, hostile_inputs

        scale = FULL if plan.hostile_scale == "full" else CI
        hostile += [(value, headers, f"x-{name}".encode()) for name, value, headers in hostile_inputs(scale)]
    if plan.stream == "hostile":  # spread through the stream, so faults land before, among and after them
        step = max(1, len(realistic) // (len(hostile) + 1))
        values = [x for i, item in enumerate(hostile) for x in (*realistic[i * step:(i + 1) * step], item)]
        values += realistic[len(hostile) * step:]
    else:
        values = realistic[: len(realistic) // 4] + hostile + realistic[len(realistic) // 4:]
    if with_huge:
        values.insert(len(realistic) // 8, (huge_record(plan.huge_bytes, plan.seed), [], b"huge"))
    return values
