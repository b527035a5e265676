"""The worker's settings: one frozen object built once from CLI flags and environment variables.

Precedence: a flag given on the command line, then the environment variable, then the default.
Every field has exactly one environment variable (listed by `telesum worker --help`).
"""

from __future__ import annotations

import argparse
import dataclasses
import os
import socket
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any


class SettingsError(ValueError):
    """A setting is missing or out of range; the message names the flag and the variable."""


def _opt(default: Any, env: str, help: str, choices: tuple[str, ...] | None = None, secret: bool = False):
    return field(default=default, repr=not secret, metadata={"env": env, "help": help, "choices": choices})


SECURITY_PROTOCOLS = ("PLAINTEXT", "SSL", "SASL_PLAINTEXT", "SASL_SSL")
PROCESSING_GUARANTEES = ("at-least-once", "exactly-once")
OVER_CAP_POLICIES = ("select", "dead_letter")
SASL_MECHANISMS = ("PLAIN", "SCRAM-SHA-256", "SCRAM-SHA-512", "OAUTHBEARER", "GSSAPI")


@dataclass(frozen=True)
class WorkerSettings:
    # Kafka topology
    bootstrap_servers: str = _opt("localhost:9092", "KAFKA_BOOTSTRAP_SERVERS", "comma-separated host:port list")
    input_topic: str = _opt("telemetry", "TELESUM_INPUT_TOPIC", "topic to read records from")
    output_topic: str = _opt("summaries", "TELESUM_OUTPUT_TOPIC", "topic summaries are written to")
    dlq_topic: str = _opt("telemetry.dlq", "TELESUM_DLQ_TOPIC", "dead-letter topic for records that fail")
    group_id: str = _opt("telesum", "TELESUM_GROUP_ID", "consumer group id")
    client_id: str = _opt("telesum-worker", "TELESUM_CLIENT_ID", "client id sent to the broker")
    auto_offset_reset: str = _opt("earliest", "TELESUM_AUTO_OFFSET_RESET", "where a new group starts",
                                  ("earliest", "latest"))
    # Security pass-through (kafka-python's own names)
    security_protocol: str = _opt("PLAINTEXT", "KAFKA_SECURITY_PROTOCOL", "broker security protocol",
                                  SECURITY_PROTOCOLS)
    sasl_mechanism: str | None = _opt(None, "KAFKA_SASL_MECHANISM", "SASL mechanism", SASL_MECHANISMS)
    sasl_plain_username: str | None = _opt(None, "KAFKA_SASL_USERNAME", "SASL username")
    sasl_plain_password: str | None = _opt(None, "KAFKA_SASL_PASSWORD", "SASL password", secret=True)
    ssl_cafile: str | None = _opt(None, "KAFKA_SSL_CAFILE", "CA bundle to verify the broker")
    ssl_certfile: str | None = _opt(None, "KAFKA_SSL_CERTFILE", "client certificate (PEM)")
    ssl_keyfile: str | None = _opt(None, "KAFKA_SSL_KEYFILE", "client private key (PEM)")
    ssl_check_hostname: bool = _opt(True, "KAFKA_SSL_CHECK_HOSTNAME", "verify the broker's hostname")
    # Consumer group timing
    session_timeout_ms: int = _opt(45000, "TELESUM_SESSION_TIMEOUT_MS", "group session timeout")
    heartbeat_interval_ms: int = _opt(3000, "TELESUM_HEARTBEAT_INTERVAL_MS", "heartbeat interval")
    max_poll_interval_ms: int = _opt(300000, "TELESUM_MAX_POLL_INTERVAL_MS", "max time between polls")
    poll_timeout_ms: int = _opt(100, "TELESUM_POLL_TIMEOUT_MS", "one poll's wait; bounds result latency")
    max_poll_records: int = _opt(256, "TELESUM_MAX_POLL_RECORDS", "records per poll at most")
    # Producer
    max_request_size: int = _opt(16 * 1024 * 1024, "TELESUM_MAX_REQUEST_SIZE",
                                 "largest produce request; bigger outputs become compact dead letters")
    delivery_timeout_ms: int = _opt(120000, "TELESUM_DELIVERY_TIMEOUT_MS", "give up one send after this")
    # Flow control and shutdown
    max_in_flight: int = _opt(256, "TELESUM_MAX_IN_FLIGHT", "records inside the summarizer before pausing")
    commit_interval_s: float = _opt(0.5, "TELESUM_COMMIT_INTERVAL_S", "commit done offsets this often")
    drain_timeout_s: float = _opt(30.0, "TELESUM_DRAIN_TIMEOUT_S", "on SIGTERM, finish in-flight work within this")
    # Delivery
    processing_guarantee: str = _opt("at-least-once", "TELESUM_PROCESSING_GUARANTEE",
                                     "'exactly-once': answers and offsets in one Kafka transaction per batch "
                                     "(consumers must read with isolation.level=read_committed)",
                                     PROCESSING_GUARANTEES)
    transaction_max_records: int = _opt(256, "TELESUM_TRANSACTION_MAX_RECORDS",
                                        "exactly-once: close a transaction after this many answers "
                                        "(or after --commit-interval-s)")
    transaction_timeout_ms: int = _opt(60000, "TELESUM_TRANSACTION_TIMEOUT_MS",
                                       "exactly-once: the broker aborts a transaction open longer than this")
    # Model and engine
    model: str = _opt("embedded", "TELESUM_MODEL",
                      "'embedded' (SmolLM2-135M), 'tiny' (random weights), a .gguf file or an HF folder")
    tokenizer: str | None = _opt(None, "TELESUM_TOKENIZER", "tokenizer folder/.gguf (default: the model's)")
    device: str = _opt("auto", "TELESUM_DEVICE", "'auto', 'cpu', 'cuda', 'cuda:N'")
    token_budget: int = _opt(8192, "TELESUM_TOKEN_BUDGET", "tokens per packed prefill bin")
    max_new_tokens: int = _opt(128, "TELESUM_MAX_NEW_TOKENS", "summary length limit in tokens")
    max_context: int | None = _opt(None, "TELESUM_MAX_CONTEXT", "context limit (default: the model's)")
    max_record_tokens: int = _opt(131072, "TELESUM_MAX_RECORD_TOKENS",
                                  "per-record work cap in body tokens (0: none); see --over-cap")
    over_cap: str = _opt("select", "TELESUM_OVER_CAP",
                         "a record over the work cap: 'select' summarises its head, tail and line-template "
                         "counts (stated in the Summary's `selection`), 'dead_letter' refuses it as too_long",
                         OVER_CAP_POLICIES)
    # Scale-out and observability
    gpus: str | None = _opt(None, "TELESUM_GPUS",
                            "one worker process per GPU under a supervisor: 'all', a count N, a list of "
                            "indices '0,2' (one GPU: '3,'; '0,0' puts two on GPU 0), or 'cpu:N' (N CPU "
                            "processes, for testing); "
                            "unset: one process, no supervisor")
    worker_id: str | None = _opt(None, "TELESUM_WORKER_ID",
                                 "this process's id in logs and the metrics' worker label (default: the client id)")
    metrics_port: int = _opt(0, "TELESUM_METRICS_PORT",
                             "serve Prometheus /metrics on this port, 0 = off; with --gpus, child i uses port + i")

    def __post_init__(self) -> None:
        for f in dataclasses.fields(self):
            value, choices = getattr(self, f.name), f.metadata["choices"]
            if choices and value is not None and value not in choices:
                raise SettingsError(f"{_names(f)} must be one of {', '.join(choices)}; got {value!r}")
        for name in ("bootstrap_servers", "input_topic", "output_topic", "dlq_topic", "group_id", "model"):
            if not str(getattr(self, name)).strip():
                raise SettingsError(f"{_names(_field(name))} must not be empty")
        if len({self.input_topic, self.output_topic, self.dlq_topic}) != 3:
            raise SettingsError("input, output and dead-letter topics must be three different topics")
        for name in ("session_timeout_ms", "heartbeat_interval_ms", "max_poll_interval_ms", "poll_timeout_ms",
                     "max_poll_records", "max_request_size", "delivery_timeout_ms", "max_in_flight",
                     "token_budget", "max_new_tokens", "transaction_max_records", "transaction_timeout_ms"):
            if getattr(self, name) <= 0:
                raise SettingsError(f"{_names(_field(name))} must be > 0; got {getattr(self, name)}")
        for name in ("commit_interval_s", "drain_timeout_s"):
            if getattr(self, name) < 0:
                raise SettingsError(f"{_names(_field(name))} must be >= 0; got {getattr(self, name)}")
        if self.max_record_tokens < 0 or (self.max_context and 0 < self.max_record_tokens < self.max_context):
            raise SettingsError(f"{_names(_field('max_record_tokens'))} must be 0 (no cap) or at least the "
                                f"context; got {self.max_record_tokens}")
        if not 0 <= self.metrics_port <= 65535:
            raise SettingsError(f"{_names(_field('metrics_port'))} must be in 0..65535; got {self.metrics_port}")
        if self.heartbeat_interval_ms >= self.session_timeout_ms:
            raise SettingsError("heartbeat interval must be below the session timeout")
        if self.security_protocol.startswith("SASL") and self.sasl_mechanism is None:
            raise SettingsError(f"{self.security_protocol} needs {_names(_field('sasl_mechanism'))}")
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

    def to_environment(self) -> dict[str, str]:
        """Every set field as its environment variable: what `from_sources` reads back into an equal
        object (the supervisor starts its children with it, keeping secrets off their command line)."""
        env = {}
        for f in dataclasses.fields(self):
            value = getattr(self, f.name)
            if value is not None:
                env[f.metadata["env"]] = ("true" if value else "false") if isinstance(value, bool) else str(value)
        return env

    @classmethod
    def from_sources(cls, args: argparse.Namespace | None = None,
                     env: Mapping[str, str] | None = None) -> WorkerSettings:
        """Flags (non-None attributes of `args`) over environment over defaults. Raises SettingsError."""
        env = os.environ if env is None else env
        values: dict[str, Any] = {}
        for f in dataclasses.fields(cls):
            flag_value = getattr(args, f.name, None) if args is not None else None
            if flag_value is not None:
                values[f.name] = flag_value
            elif f.metadata["env"] in env:
                values[f.name] = _parse(f, env[f.metadata["env"]])
        return cls(**values)


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """One `--flag` per setting, defaulting to None so the environment can fill it in."""
    for f in dataclasses.fields(WorkerSettings):
        flag = "--" + f.name.replace("_", "-")
        help_text = f"{f.metadata['help']} (env {f.metadata['env']}; default {f.default!r})"
        if _base_type(f) is bool:
            parser.add_argument(flag, dest=f.name, default=None, action=argparse.BooleanOptionalAction,
                                help=help_text)
        else:
            parser.add_argument(flag, dest=f.name, default=None, type=_base_type(f),
                                choices=f.metadata["choices"], help=help_text)


def environment_names() -> set[str]:
    """The environment variable of every setting."""
    return {f.metadata["env"] for f in dataclasses.fields(WorkerSettings)}


def _field(name: str) -> dataclasses.Field:
    return next(f for f in dataclasses.fields(WorkerSettings) if f.name == name)


def _names(f: dataclasses.Field) -> str:
    return f"--{f.name.replace('_', '-')} ({f.metadata['env']})"


def _base_type(f: dataclasses.Field) -> type:
    text = f.type if isinstance(f.type, str) else f.type.__name__
    return {"int": int, "float": float, "bool": bool}.get(text.split(" |")[0], str)


def _parse(f: dataclasses.Field, raw: str) -> Any:
    kind = _base_type(f)
    if kind is bool:
        lowered = raw.strip().lower()
        if lowered in ("1", "true", "yes", "on"):
            return True
        if lowered in ("0", "false", "no", "off"):
            return False
        raise SettingsError(f"{f.metadata['env']} must be true or false; got {raw!r}")
    try:
        return kind(raw)
    except ValueError:
        raise SettingsError(f"{f.metadata['env']} must be a {kind.__name__}; got {raw!r}") from None
