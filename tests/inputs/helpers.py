"""Fixture loading and OTLP protobuf building for the input-layer tests."""

from __future__ import annotations

from pathlib import Path

from google.protobuf import json_format
from opentelemetry.proto.collector.logs.v1.logs_service_pb2 import ExportLogsServiceRequest

FIXTURES = Path(__file__).resolve().parent.parent / "fixtures" / "inputs"


def fixture(name: str) -> bytes:
    return (FIXTURES / name).read_bytes()


def syslog_lines() -> list[bytes]:
    """One raw line per message, as rsyslog omkafka / syslog-ng kafka-c send them."""
    return [line for line in fixture("syslog_lines.txt").splitlines() if line.strip()]


def otlp_proto() -> bytes:
    """The otlp_json fixture as the collector's default otlp_proto encoding of the same request."""
    request = json_format.Parse(fixture("otlp_logs.json").decode(), ExportLogsServiceRequest())
    return request.SerializeToString()


# (name, format, message bytes, records expected, host of the first record)
SHAPES = [
    ("ves_fault", "ves", lambda: fixture("ves_fault.json"), 1, "gnb-du-0412"),
    ("ves_eventlist", "ves", lambda: fixture("ves_measurement_eventlist.json"), 2, "gnb-cu-17"),
    ("rsyslog_line", "syslog", lambda: syslog_lines()[0], 1, "gnb-du-0412"),
    ("rfc5424_line", "syslog", lambda: syslog_lines()[2], 1, "core-rtr-2"),
    ("rfc3164_line", "syslog", lambda: syslog_lines()[3], 1, "cell-gw-7"),
    ("fluentbit_syslog", "json-log", lambda: fixture("fluentbit_syslog.json"), 1, "gnb-du-0412"),
    ("fluentbit_tail", "json-log", lambda: fixture("fluentbit_tail.json"), 1, "upf-3"),
    ("vector_syslog", "json-log", lambda: fixture("vector_syslog.json"), 1, "core-sw-1"),
    ("fluentbit_http_batch", "json-log", lambda: fixture("fluentbit_http_batch.json"), 3, "upf-3"),
    ("vector_http_batch", "json-log", lambda: fixture("vector_http_batch.json"), 2, "core-sw-1"),
    ("otlp_json", "otlp", lambda: fixture("otlp_logs.json"), 2, "amf-1"),
    ("otlp_proto", "otlp", otlp_proto, 2, "amf-1"),
]
