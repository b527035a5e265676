"""The hostile stream of `telesum bench faults --stream hostile`: every kind of input that once could,
or still might, stop or swell a worker (deep nesting in each encoding, decompression bombs in each
codec, a line of many megabytes, a million keys, numbers out of range, lone surrogates and NUL,
escape sequences, thousands of binary headers, batches far over the item limit, a huge id), mixed
into realistic records and log lines whose windows are open when the faults land.

`Scale` sizes them: `FULL` is what issue-level figures are measured with; `CI` keeps the same kinds
small enough for the test suite (its bombs still expand past the worker's --max-batch-bytes)."""

from __future__ import annotations

from dataclasses import dataclass

import msgspec


@dataclass(frozen=True)
class Scale:
    depth: int                 # nesting levels
    bomb_bytes: int            # what each decompression bomb expands to
    line_bytes: int            # the single syslog line without a newline
    keys: int                  # keys of one JSON object
    headers: int               # headers of one message
    event_list: int            # events of one VES eventList
    otlp_records: int          # log records of one OTLP request
    id_bytes: int              # length of one record's id
    max_batch_bytes: int       # the worker's --max-batch-bytes
    max_items: int             # the worker's --max-items-per-message


FULL = Scale(depth=100_000, bomb_bytes=1100 << 20, line_bytes=50 << 20, keys=1_000_000, headers=10_000,
             event_list=100_000, otlp_records=1_000_000, id_bytes=1 << 20, max_batch_bytes=128 << 20, max_items=1000)
CI = Scale(depth=100_000, bomb_bytes=48 << 20, line_bytes=96 << 10, keys=100_000, headers=10_000,
           event_list=2_000, otlp_records=20_000, id_bytes=1 << 20, max_batch_bytes=16 << 20, max_items=100)
CODECS = ("gzip", "snappy", "lz4", "zstd")
# A bomb is sent as records of this size, all in one compressed batch.
BOMB_RECORD_BYTES = 1 << 20


@dataclass(frozen=True)
class Bomb:
    """Records of zeros that the producer compresses into one batch expanding to `total_bytes`."""

    codec: str
    total_bytes: int

    @property
    def records(self) -> int:
        return -(-self.total_bytes // BOMB_RECORD_BYTES)


def _varint(n: int) -> bytes:
    out = bytearray()
    while True:
        byte, n = n & 0x7F, n >> 7
        out.append(byte | (0x80 if n else 0))
        if not n:
            return bytes(out)


def _field(tag: int, payload: bytes) -> bytes:
    return bytes([tag]) + _varint(len(payload)) + payload


def nested_otlp_request(depth: int) -> bytes:
    """An OTLP logs request whose one log record's body is an AnyValue array nested `depth` deep
    (written as protobuf bytes, inside out: protobuf's own types refuse such depth)."""
    prefixes, length = [], 0
    for _ in range(depth):
        array = b"\x0a" + _varint(length)              # ArrayValue.values
        value = b"\x2a" + _varint(length + len(array))  # AnyValue.array_value
        prefixes.append(value + array)
        length += len(array) + len(value)
    body = b"".join(reversed(prefixes))
    return _field(0x0a, _field(0x12, _field(0x12, _field(0x2a, body))))


def otlp_request(records: int) -> bytes:
    """An OTLP logs request (the collector's otlp_proto) of one resource holding `records` log lines."""
    from opentelemetry.proto.collector.logs.v1.logs_service_pb2 import ExportLogsServiceRequest

    request = ExportLogsServiceRequest()
    resource = request.resource_logs.add()
    host = resource.resource.attributes.add()
    host.key, host.value.string_value = "host.name", "upf-7"
    scope = resource.scope_logs.add()
    for i in range(records):
        log = scope.log_records.add()
        log.time_unix_nano, log.severity_number = 1_796_135_952_000_000_000 + i * 1_000_000, 13
        log.body.string_value = f"session {i} released: idle timeout"
    return request.SerializeToString()


def event_list(events: int) -> bytes:
    header = {"domain": "fault", "eventName": "Fault_gNB_LinkDown", "priority": "High", "sourceName": "gnb-du-0412",
              "reportingEntityName": "gnb-du-0412", "sequence": 1, "startEpochMicrosec": 1796135952000000,
              "lastEpochMicrosec": 1796135952000000, "version": "4.1", "vesEventListenerVersion": "7.2.1"}
    fault = {"alarmCondition": "linkDown", "eventSeverity": "MAJOR", "eventSourceType": "gNB",
             "faultFieldsVersion": "4.0", "specificProblem": "S1 link down", "vfStatus": "Active"}
    return msgspec.json.encode({"eventList": [{"commonEventHeader": {**header, "eventId": f"bulk-{i}"},
                                               "faultFields": fault} for i in range(events)]})


def hostile_inputs(scale: Scale) -> list[tuple[str, object, list[tuple[str, bytes]]]]:
    """(name, value or Bomb, headers) of every hostile input, in the order they are sent."""
    d = scale.depth
    msgpack = [("content-type", b"application/msgpack")]
    head = msgspec.msgpack.encode({"id": "deep-msgpack", "kind": "text"})
    deep_msgpack = bytes([head[0] + 1]) + head[1:] + msgspec.msgpack.encode("body") + b"\x81\xa1a" * d + b"\x01"
    keys = b"{" + b",".join(b'"k%d":%d' % (i, i) for i in range(scale.keys)) + b"}"
    inputs: list[tuple[str, object, list]] = [
        ("deep_json_arrays", b'{"id": "deep-a", "kind": "text", "body": ' + b"[" * d + b"]" * d + b"}", []),
        ("deep_json_objects", b'{"a": ' * d + b"1" + b"}" * d, []),
        ("deep_ves", b'{"event": {"commonEventHeader": {"domain": "fault"}, "x": ' + b"[" * d + b"]" * d + b"}}", []),
        ("deep_msgpack", deep_msgpack, msgpack),
        ("deep_otlp_protobuf", nested_otlp_request(d), []),
        *((f"bomb_{codec}", Bomb(codec, scale.bomb_bytes), []) for codec in CODECS),
        ("huge_line", b"<13>1 2026-12-01T14:39:12Z gnb-du-0413 du_app - - - " + b"x" * scale.line_bytes, []),
        ("million_keys", keys, []),
        ("number_1e400", b'{"id": "n1", "kind": "text", "body": "x", "timestamp": 1e400}', []),
        ("number_minus_0", b'{"id": "n2", "kind": "text", "body": "x", "timestamp": -0}', []),
        ("number_2_70", b'{"id": "n3", "kind": "text", "body": "x", "timestamp": %d}' % 2**70, []),
        ("lone_surrogate", b'{"id": "s1", "kind": "text", "body": "link \\ud800 down"}', []),
        ("nul_in_json", b'{"message": "link\\u0000down on port 3", "host": "sw-1"}', []),
        ("ansi_syslog", b"<11>1 2026-12-01T14:39:12Z core-rtr-2 bgpd 77 - - \x1b[2J\x1b[31mneighbor 10.0.0.1 "
                        b"Down\x1b[0m\x00 hold timer expired", []),
        ("headers", b'{"id": "hdr", "kind": "text", "body": "fan tray failure"}',
         [(f"x-h{i}", bytes([i % 256]) * 16) for i in range(scale.headers)]),
        ("event_list", event_list(scale.event_list), []),
        ("otlp_records", otlp_request(scale.otlp_records), []),
        ("huge_id", b'{"id": "' + b"i" * scale.id_bytes + b'", "kind": "text", "body": "x"}', []),
    ]
    return inputs
