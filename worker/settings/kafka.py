"""The `[kafka]` section of the settings: topics, group, security, timing, flow control, scale-out.

One frozen msgspec Struct; `worker.settings` builds it (with the other sections) from flags,
environment, the TOML file and defaults, and msgspec converts and checks every value against the
constraints below. A new setting is one annotated field here: `opt(env, help, constraints)`.
"""

from __future__ import annotations

import socket
from typing import Annotated, Any, Literal

import msgspec

from worker.settings.fields import MaskedRepr, SettingsError, opt

# What one message may cost (docs/operations.md, "What one input can make the worker do"): the items
# it may bring to be summarised, and the bytes one of its compressed batches may expand to (a gzip
# bomb of a few MB expands to GBs; kafka-python would hold it whole, twice).
MAX_ITEMS_PER_MESSAGE = 1000
MAX_BATCH_BYTES = 128 * 1024 * 1024

__all__ = ["SettingsError", "KafkaSettings"]

Positive = dict(gt=0)
# `role=key|key,role=key`, the roles of worker/inputs/json_log.py (checked here so a typo fails at start-up).
_FIELD_ENTRY = r"\s*(message|host|app|pid|timestamp|severity|facility)=[^,|=\s]+(\|[^,|=\s]+)*\s*"
_FIELD_MAP = rf"^(\s*|{_FIELD_ENTRY}(,{_FIELD_ENTRY})*)$"


class KafkaSettings(MaskedRepr, msgspec.Struct, frozen=True, kw_only=True, forbid_unknown_fields=True):
    """What the Kafka worker (`KafkaWorker`, the clients and the supervisor) reads."""

    # Kafka topology
    bootstrap_servers: Annotated[str, opt("KAFKA_BOOTSTRAP_SERVERS", "comma-separated host:port list",
                                          pattern=r"\S")] = "localhost:9092"
    input_topic: Annotated[str, opt("TELESUM_INPUT_TOPIC", "topic to read records from", pattern=r"\S")] = "telemetry"
    output_topic: Annotated[str, opt("TELESUM_OUTPUT_TOPIC", "topic summaries are written to",
                                     pattern=r"\S")] = "summaries"
    dlq_topic: Annotated[str, opt("TELESUM_DLQ_TOPIC", "dead-letter topic for records that fail",
                                  pattern=r"\S")] = "telemetry.dlq"
    group_id: Annotated[str, opt("TELESUM_GROUP_ID", "consumer group id", pattern=r"\S")] = "telesum"
    client_id: Annotated[str, opt("TELESUM_CLIENT_ID", "client id sent to the broker")] = "telesum-worker"
    auto_offset_reset: Annotated[Literal["earliest", "latest"],
                                 opt("TELESUM_AUTO_OFFSET_RESET", "where a new group starts")] = "earliest"
    # Security pass-through (kafka-python's own names)
    security_protocol: Annotated[Literal["PLAINTEXT", "SSL", "SASL_PLAINTEXT", "SASL_SSL"],
                                 opt("KAFKA_SECURITY_PROTOCOL", "broker security protocol")] = "PLAINTEXT"
    sasl_mechanism: Annotated[Literal["PLAIN", "SCRAM-SHA-256", "SCRAM-SHA-512", "OAUTHBEARER", "GSSAPI"] | None,
                              opt("KAFKA_SASL_MECHANISM", "SASL mechanism")] = None
    sasl_plain_username: Annotated[str | None, opt("KAFKA_SASL_USERNAME", "SASL username")] = None
    sasl_plain_password: Annotated[str | None, opt("KAFKA_SASL_PASSWORD", "SASL password", secret=True)] = None
    ssl_cafile: Annotated[str | None, opt("KAFKA_SSL_CAFILE", "CA bundle to verify the broker")] = None
    ssl_certfile: Annotated[str | None, opt("KAFKA_SSL_CERTFILE", "client certificate (PEM)")] = None
    ssl_keyfile: Annotated[str | None, opt("KAFKA_SSL_KEYFILE", "client private key (PEM)")] = None
    ssl_check_hostname: Annotated[bool, opt("KAFKA_SSL_CHECK_HOSTNAME", "verify the broker's hostname")] = True
    # Consumer group timing
    session_timeout_ms: Annotated[int, opt("TELESUM_SESSION_TIMEOUT_MS", "group session timeout", **Positive)] = 45000
    heartbeat_interval_ms: Annotated[int, opt("TELESUM_HEARTBEAT_INTERVAL_MS", "heartbeat interval",
                                              **Positive)] = 3000
    max_poll_interval_ms: Annotated[int, opt("TELESUM_MAX_POLL_INTERVAL_MS", "max time between polls",
                                             **Positive)] = 300000
    poll_timeout_ms: Annotated[int, opt("TELESUM_POLL_TIMEOUT_MS", "one poll's wait; bounds result latency",
                                        **Positive)] = 100
    max_poll_records: Annotated[int, opt("TELESUM_MAX_POLL_RECORDS", "records per poll at most", **Positive)] = 256
    # Producer
    max_request_size: Annotated[int, opt("TELESUM_MAX_REQUEST_SIZE",
                                         "largest produce request; bigger outputs become compact dead letters",
                                         **Positive)] = 16 * 1024 * 1024
    delivery_timeout_ms: Annotated[int, opt("TELESUM_DELIVERY_TIMEOUT_MS", "give up one send after this",
                                            **Positive)] = 120000
    # Flow control and shutdown
    max_in_flight: Annotated[Annotated[int, msgspec.Meta(gt=0)] | None, opt(
        "TELESUM_MAX_IN_FLIGHT", "records inside the summarizer before pausing (default: two full bins of sequences)",
    )] = None
    commit_interval_s: Annotated[float, opt("TELESUM_COMMIT_INTERVAL_S", "commit done offsets this often",
                                            ge=0)] = 0.5
    drain_timeout_s: Annotated[float, opt("TELESUM_DRAIN_TIMEOUT_S", "on SIGTERM, finish in-flight work within this",
                                          ge=0)] = 30.0
    # Delivery
    processing_guarantee: Annotated[Literal["at-least-once", "exactly-once"], opt(
        "TELESUM_PROCESSING_GUARANTEE", "'exactly-once': answers and offsets in one Kafka transaction per batch "
                                        "(consumers must read with isolation.level=read_committed)")] = "at-least-once"
    transaction_max_records: Annotated[int, opt("TELESUM_TRANSACTION_MAX_RECORDS",
                                                "exactly-once: close a transaction after this many answers "
                                                "(or after --commit-interval-s)", **Positive)] = 256
    transaction_timeout_ms: Annotated[int, opt("TELESUM_TRANSACTION_TIMEOUT_MS",
                                               "exactly-once: the broker aborts a transaction open longer than this",
                                               **Positive)] = 60000
    # Input formats (worker/inputs, docs/inputs.md)
    input_format: Annotated[Literal["auto", "envelope", "ves", "syslog", "json-log", "otlp"], opt(
        "TELESUM_INPUT_FORMAT", "what the input topic holds: 'auto' decides per message (docs/inputs.md)")] = "auto"
    json_log_fields: Annotated[str, opt(
        "TELESUM_JSON_LOG_FIELDS", "json-log field map over the defaults, e.g. 'message=msg|text,host=node' "
                                   "(roles: message host app pid timestamp severity facility)",
        pattern=_FIELD_MAP)] = ""
    window_s: Annotated[float, opt("TELESUM_WINDOW_S", "log lines: close a host's window this long after its "
                                                       "first line (0: one summary per message)", ge=0)] = 5.0
    window_max_lines: Annotated[int, opt("TELESUM_WINDOW_MAX_LINES", "log lines: close a window at this many lines",
                                         **Positive)] = 500
    window_max_bytes: Annotated[int, opt("TELESUM_WINDOW_MAX_BYTES", "log lines: close a window at this many bytes",
                                         **Positive)] = 64 * 1024
    max_items_per_message: Annotated[int, opt(
        "TELESUM_MAX_ITEMS_PER_MESSAGE", "VES events or OTLP log records one message may bring to be summarised; "
                                         "those beyond get dead letters too_many_items, each carrying its items",
        **Positive)] = MAX_ITEMS_PER_MESSAGE
    # Scale-out
    gpus: Annotated[str | None, opt("TELESUM_GPUS",
                                    "one worker process per GPU under a supervisor: 'all', a count N, a list of "
                                    "indices '0,2' (one GPU: '3,'; '0,0' puts two on GPU 0), or 'cpu:N' (N CPU "
                                    "processes, for testing); unset: one process, no supervisor")] = None
    worker_id: Annotated[str | None, opt("TELESUM_WORKER_ID",
                                         "this process's id in logs and the metrics' worker label "
                                         "(default: the client id)")] = None
    # Compressed or corrupt input batches (docs/kafka-consumption.md)
    on_undecodable_batch: Annotated[Literal["pause", "exit"], opt(
        "TELESUM_ON_UNDECODABLE_BATCH", "a batch that cannot be decompressed or fails its CRC: 'pause' its "
                                        "partition there (reported stuck, retried, others served) or 'exit' "
                                        "(drain the others, exit code 6)")] = "pause"
    max_batch_bytes: Annotated[int, opt(
        "TELESUM_MAX_BATCH_BYTES", "a compressed batch that expands beyond this many bytes is not decompressed "
                                   "further: each of its offsets gets a dead letter batch_too_large",
        **Positive)] = MAX_BATCH_BYTES
    undecodable_retry_s: Annotated[float, opt("TELESUM_UNDECODABLE_RETRY_S",
                                              "try a stuck partition's batch again after this", gt=0)] = 60.0
    allow_missing_codecs: Annotated[bool, opt("TELESUM_ALLOW_MISSING_CODECS",
                                              "start even when a compression codec's library is missing "
                                              "(default: refuse, exit code 5)")] = False

    def __post_init__(self) -> None:
        if len({self.input_topic, self.output_topic, self.dlq_topic}) != 3:
            raise SettingsError("input, output and dead-letter topics must be three different topics")
        if self.heartbeat_interval_ms >= self.session_timeout_ms:
            raise SettingsError("heartbeat interval must be below the session timeout")
        if self.security_protocol.startswith("SASL") and self.sasl_mechanism is None:
            raise SettingsError(f"{self.security_protocol} needs --sasl-mechanism (KAFKA_SASL_MECHANISM)")
        if self.sasl_mechanism in ("PLAIN", "SCRAM-SHA-256", "SCRAM-SHA-512") and (
                self.sasl_plain_username is None or self.sasl_plain_password is None):
            raise SettingsError(f"SASL {self.sasl_mechanism} needs a username and a password")

    @property
    def security_config(self) -> dict[str, Any]:
        """kafka-python keyword arguments shared by the consumer and the producer."""
        cfg: dict[str, Any] = {"bootstrap_servers": self.bootstrap_servers.split(","),
                               "client_id": self.client_id, "security_protocol": self.security_protocol}
        for name in ("sasl_mechanism", "sasl_plain_username", "sasl_plain_password",
                     "ssl_cafile", "ssl_certfile", "ssl_keyfile"):
            if getattr(self, name) is not None:
                cfg[name] = getattr(self, name)
        if self.security_protocol in ("SSL", "SASL_SSL"):
            cfg["ssl_check_hostname"] = self.ssl_check_hostname
        return cfg

    def client_config(self, bootstrap_servers: str | None = None) -> dict[str, Any]:
        """security_config, with a command's --bootstrap-servers (comma-separated) over the setting."""
        cfg = self.security_config
        if bootstrap_servers:
            cfg["bootstrap_servers"] = bootstrap_servers.split(",")
        return cfg

    @property
    def exactly_once(self) -> bool:
        return self.processing_guarantee == "exactly-once"

    @property
    def transactional_id(self) -> str:
        """Stable per worker across restarts, so a restarted worker fences its previous life."""
        return f"telesum.{self.group_id}.{self.worker_id or socket.gethostname()}"

    @property
    def worker_name(self) -> str:
        """The `worker` label of logs and metrics."""
        return self.worker_id or self.client_id
