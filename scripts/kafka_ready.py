#!/usr/bin/env python3
"""Is a Kafka broker at HOST:PORT ready to serve clients? Python standard library only (no venv).

Usage: kafka_ready.py HOST PORT [--timeout S] [--pid PID]

Sends ApiVersions (v0), then Metadata (v4), over a plain socket, and is ready once the broker
answers both and lists at least one registered broker: accepting connections is not enough, a
KRaft broker answers before it can serve metadata. Exit 0 when ready; 1 with one line saying what
is wrong (nothing listening, not a Kafka broker, no broker registered yet, the process died).
"""

from __future__ import annotations

import argparse
import os
import socket
import struct
import sys
import time

API_VERSIONS, METADATA = 18, 3
CLIENT_ID = b"telesum-ready"
_RETRY_S = 0.5


class NotKafka(Exception):
    """Something answered that does not speak the Kafka protocol."""


def _request(sock: socket.socket, api_key: int, version: int, correlation: int, body: bytes) -> bytes:
    header = struct.pack(">hhih", api_key, version, correlation, len(CLIENT_ID)) + CLIENT_ID
    payload = header + body
    sock.sendall(struct.pack(">i", len(payload)) + payload)
    raw_size = _read(sock, 4)
    (size,) = struct.unpack(">i", raw_size)
    if size < 4 or size > 64 * 1024 * 1024:
        raise NotKafka(f"a reply of {size} bytes (first bytes {raw_size!r}) is no Kafka response")
    reply = _read(sock, size)
    (got,) = struct.unpack(">i", reply[:4])
    if got != correlation:
        raise NotKafka(f"reply correlation id {got}, expected {correlation}")
    return reply[4:]


def _read(sock: socket.socket, n: int) -> bytes:
    out = b""
    while len(out) < n:
        chunk = sock.recv(n - len(out))
        if not chunk:
            raise ConnectionError("the connection closed before a full reply arrived")
        out += chunk
    return out


def check(host: str, port: int, timeout_s: float = 5.0) -> str | None:
    """None when ready, else why not (one line). Raises NotKafka for a non-Kafka peer."""
    with socket.create_connection((host, port), timeout=timeout_s) as sock:
        versions = _request(sock, API_VERSIONS, 0, 1, b"")
        (error,) = struct.unpack(">h", versions[:2])
        if error != 0:
            return f"ApiVersions answered error code {error}"
        # Metadata v4: topics = null (all), allow_auto_topic_creation = false.
        meta = _request(sock, METADATA, 4, 2, struct.pack(">ib", -1, 0))
        _throttle, brokers = struct.unpack(">ii", meta[:8])
        if brokers <= 0:
            return "the broker answers but no broker is registered in the cluster yet"
        return None


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("host")
    parser.add_argument("port", type=int)
    parser.add_argument("--timeout", type=float, default=0.0, help="keep trying this long (0: one try)")
    parser.add_argument("--pid", type=int, default=None, help="give up when this process exits")
    args = parser.parse_args(argv)
    deadline = time.monotonic() + args.timeout
    where = f"{args.host}:{args.port}"
    while True:
        if args.pid is not None:
            try:
                os.kill(args.pid, 0)
            except OSError:
                print(f"the broker process (pid {args.pid}) exited while starting", file=sys.stderr)
                return 1
        try:
            problem = check(args.host, args.port)
        except NotKafka as exc:
            print(f"{where} is not a Kafka broker: {exc}", file=sys.stderr)
            return 1
        except ConnectionRefusedError:
            problem = f"nothing is listening on {where} (connection refused)"
        except socket.timeout:
            problem = f"{where} accepted the connection but did not answer within 5 s"
        except OSError as exc:
            problem = f"cannot reach {where}: {exc}"
        if problem is None:
            return 0
        if time.monotonic() >= deadline:
            print(f"broker not ready: {problem}", file=sys.stderr)
            return 1
        time.sleep(_RETRY_S)


if __name__ == "__main__":
    sys.exit(main())
