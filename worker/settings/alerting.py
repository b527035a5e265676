"""The `[alerting]` section: each incident as one Prometheus Alertmanager alert (docs/incidents.md).

Off while `alertmanager_url` is unset. The options follow Prometheus' `alertmanager_config` (basic auth,
a bearer token, TLS with a CA, a client certificate), each secret also from a file; a secret never
reaches a log, `telesum config` or the status page (`secret=True`), and a URL carrying one is refused.
"""

from __future__ import annotations

import re
from typing import Annotated
from urllib.parse import urlsplit

import msgspec

from worker.settings.fields import MaskedRepr, SettingsError, opt

# The labels telesum sets on every alert: an extra static label may not take one of these names.
IDENTIFYING_LABELS = ("alertname", "incident_id", "root_element", "root_alarm_type", "grouping", "severity")
_LABEL_NAME = re.compile(r"^[a-zA-Z_][a-zA-Z0-9_]*$")


class AlertingSettings(MaskedRepr, msgspec.Struct, frozen=True, kw_only=True, forbid_unknown_fields=True):
    """Incidents as Alertmanager alerts: one per incident, firing while it is open, resolved with it."""

    alertmanager_url: Annotated[str | None, opt(
        "TELESUM_ALERTMANAGER_URL", "Alertmanager base URL(s), comma-separated (an HA pair: every one gets every "
                                    "alert); alerts go to <url>/api/v2/alerts (unset: off)",
        flag="alertmanager-url")] = None
    labels: Annotated[str | None, opt("TELESUM_ALERTMANAGER_LABELS", "static labels added to every alert, "
                                                                     "name=value,name=value (e.g. "
                                                                     "cluster=east,region=eu)",
                                      flag="alertmanager-labels")] = None
    severity: Annotated[str, opt("TELESUM_ALERTMANAGER_SEVERITY", "the alerts' severity label",
                                 flag="alertmanager-severity", pattern=r"^\S+$")] = "major"
    resend_s: Annotated[float, opt("TELESUM_ALERTMANAGER_RESEND_S",
                                   "re-post every open incident's alert this often; each says it ends 4 times this "
                                   "long after it was posted unless posted again", flag="alertmanager-resend-s",
                                   gt=0, le=3600)] = 60.0
    timeout_s: Annotated[float, opt("TELESUM_ALERTMANAGER_TIMEOUT_S", "timeout of one request to an Alertmanager",
                                    flag="alertmanager-timeout-s", gt=0, le=300)] = 10.0
    queue_size: Annotated[int, opt("TELESUM_ALERTMANAGER_QUEUE_SIZE",
                                   "incident events waiting for the sender, and alerts waiting per Alertmanager, at "
                                   "most (beyond: dropped, counted and logged)", flag="alertmanager-queue-size",
                                   ge=1, le=1_000_000)] = 10000
    username: Annotated[str | None, opt("TELESUM_ALERTMANAGER_USERNAME", "basic auth user name",
                                        flag="alertmanager-username")] = None
    password: Annotated[str | None, opt("TELESUM_ALERTMANAGER_PASSWORD", "basic auth password",
                                        flag="alertmanager-password", secret=True)] = None
    password_file: Annotated[str | None, opt("TELESUM_ALERTMANAGER_PASSWORD_FILE",
                                             "basic auth password, read from this file",
                                             flag="alertmanager-password-file")] = None
    bearer_token: Annotated[str | None, opt("TELESUM_ALERTMANAGER_BEARER_TOKEN", "Authorization: Bearer token",
                                            flag="alertmanager-bearer-token", secret=True)] = None
    bearer_token_file: Annotated[str | None, opt("TELESUM_ALERTMANAGER_BEARER_TOKEN_FILE",
                                                 "bearer token, read from this file",
                                                 flag="alertmanager-bearer-token-file")] = None
    ca_file: Annotated[str | None, opt("TELESUM_ALERTMANAGER_CA_FILE", "CA certificate(s) to verify an https "
                                                                       "Alertmanager with (unset: the system's)",
                                       flag="alertmanager-ca-file")] = None
    cert_file: Annotated[str | None, opt("TELESUM_ALERTMANAGER_CERT_FILE", "client certificate (TLS)",
                                         flag="alertmanager-cert-file")] = None
    key_file: Annotated[str | None, opt("TELESUM_ALERTMANAGER_KEY_FILE", "client certificate's key (TLS)",
                                        flag="alertmanager-key-file")] = None
    insecure_skip_verify: Annotated[bool, opt("TELESUM_ALERTMANAGER_INSECURE_SKIP_VERIFY",
                                              "do not verify the Alertmanager's certificate",
                                              flag="alertmanager-insecure-skip-verify")] = False

    def __post_init__(self) -> None:
        self.urls()
        self.static_labels()
        if self.password is not None and self.password_file is not None:
            raise SettingsError("alerting: set one of TELESUM_ALERTMANAGER_PASSWORD and _PASSWORD_FILE, not both")
        if self.bearer_token is not None and self.bearer_token_file is not None:
            raise SettingsError("alerting: set one of TELESUM_ALERTMANAGER_BEARER_TOKEN and _BEARER_TOKEN_FILE, "
                                "not both")
        basic = self.username is not None or self.password is not None or self.password_file is not None
        if basic and self.username is None:
            raise SettingsError("alerting: a basic auth password needs TELESUM_ALERTMANAGER_USERNAME")
        if basic and (self.bearer_token is not None or self.bearer_token_file is not None):
            raise SettingsError("alerting: basic auth and a bearer token are exclusive (as in Prometheus)")
        if (self.cert_file is None) != (self.key_file is None):
            raise SettingsError("alerting: TELESUM_ALERTMANAGER_CERT_FILE and _KEY_FILE go together")

    @property
    def enabled(self) -> bool:
        return bool(self.urls())

    def urls(self) -> tuple[str, ...]:
        """The Alertmanagers' base URLs, without a trailing slash; SettingsError for a malformed one."""
        out = []
        for url in (self.alertmanager_url or "").split(","):
            url = url.strip().rstrip("/")
            if not url:
                continue
            parts = urlsplit(url)
            if parts.scheme not in ("http", "https") or not parts.hostname:
                raise SettingsError(f"alerting.alertmanager_url (TELESUM_ALERTMANAGER_URL): {url!r} is not an "
                                    "http(s)://host[:port][/prefix] URL")
            if parts.username is not None or parts.password is not None:
                raise SettingsError("alerting.alertmanager_url (TELESUM_ALERTMANAGER_URL) may not carry a user or "
                                    "password: use TELESUM_ALERTMANAGER_USERNAME and _PASSWORD(_FILE)")
            if parts.query or parts.fragment:
                raise SettingsError(f"alerting.alertmanager_url (TELESUM_ALERTMANAGER_URL): {url!r} has a query "
                                    "or fragment")
            out.append(url)
        return tuple(out)

    def static_labels(self) -> dict[str, str]:
        """TELESUM_ALERTMANAGER_LABELS as a dict; SettingsError for a bad or reserved name."""
        out: dict[str, str] = {}
        for item in (self.labels or "").split(","):
            if not item.strip():
                continue
            name, sep, value = item.partition("=")
            name, value = name.strip(), value.strip()
            if not sep or not _LABEL_NAME.match(name) or not value:
                raise SettingsError(f"alerting.labels (TELESUM_ALERTMANAGER_LABELS): {item.strip()!r} is not "
                                    "name=value with a Prometheus label name")
            if name in IDENTIFYING_LABELS or name.startswith("__"):
                raise SettingsError(f"alerting.labels (TELESUM_ALERTMANAGER_LABELS): {name} is set by telesum")
            out[name] = value
        return out
