"""The settings type: `Settings` with one Struct per section, every field a `opt(...)` declaration.

`[engine]` is the one model/engine/GPU section that `telesum worker` and `telesum summarize` share,
so the same model packs the same way in both. Budgets left unset (None) are "auto": the probe's
figures when it has them for the device, else the device defaults in `budgets.py`.
"""

from __future__ import annotations

from typing import Annotated, Literal, get_args

import msgspec

from worker.settings.alerting import AlertingSettings
from worker.settings.incidents import IncidentSettings
from worker.settings.kafka import KafkaSettings
from worker.settings.budgets import (CPU_MAX_SEQS_PER_BIN, CPU_TOKEN_BUDGET, CPU_WORK_CAP_S, GPU_GIL_SWITCH_MS,
                                     GPU_MAX_SEQS_PER_BIN, GPU_TOKEN_BUDGET, GPU_WORK_CAP_TOKENS, MIN_WORK_CAP_TOKENS,
                                     PREFIX_CACHE_MAX_ROWS)
from worker.settings.fields import FieldSpec, MaskedRepr, SettingsError, opt, section_fields

_Struct = dict(frozen=True, kw_only=True, forbid_unknown_fields=True)
PositiveInt = Annotated[int, msgspec.Meta(gt=0)]
NonNegativeInt = Annotated[int, msgspec.Meta(ge=0)]
PositiveFloat = Annotated[float, msgspec.Meta(gt=0)]
OverCap = Literal["select", "dead_letter"]  # what happens to a record over the per-record work cap


class EngineSettings(MaskedRepr, msgspec.Struct, **_Struct):
    """The model, the device and how the engine packs and generates."""

    model: Annotated[str, opt("TELESUM_MODEL", "'embedded' (SmolLM2-135M), 'tiny' (random weights, for tests), "
                                               "a .gguf file or a Hugging Face folder", pattern=r"\S")] = "embedded"
    tokenizer: Annotated[str | None, opt("TELESUM_TOKENIZER", "tokenizer folder/.gguf (default: the model's)")] = None
    device: Annotated[str, opt("TELESUM_DEVICE", "'auto' (cuda when available), 'cpu', 'cuda', 'cuda:N'",
                               pattern=r"^(auto|cpu|cuda(:\d+)?)$")] = "auto"
    backend: Annotated[Literal["flash_attn", "torch_fa2", "sdpa"] | None,
                       opt("TELESUM_BACKEND", "attention backend (default: the fastest available)")] = None
    dtype: Annotated[Literal["auto", "fp8"], opt(
        "TELESUM_DTYPE", "'auto' (bf16 on a GPU, fp32 on CPU) or 'fp8': the decoder's projections in FP8 "
                         "(per-row weight and per-token activation scales; Ada/Hopper GPUs)")] = "auto"
    kv_cache: Annotated[Literal["auto", "fp8"], opt(
        "TELESUM_KV_CACHE", "'auto' (K/V in the model's dtype) or 'fp8': K/V stored as e4m3 with one scale per "
                            "token and head: twice the sequences the arena holds, for long records or many at "
                            "once; not faster (measured on an H100, docs/engine.md) (Ada/Hopper GPUs, or CPU "
                            "for checks)")] = "auto"
    token_budget: Annotated[PositiveInt | None, opt("TELESUM_TOKEN_BUDGET",
                                                    "tokens per packed prefill bin (auto: probe, else "
                                                    f"{GPU_TOKEN_BUDGET} on a GPU, {CPU_TOKEN_BUDGET} on CPU)")] = None
    max_seqs_per_bin: Annotated[PositiveInt | None, opt("TELESUM_MAX_SEQS_PER_BIN",
                                                        "sequences per packed bin (auto: probe, else "
                                                        f"{GPU_MAX_SEQS_PER_BIN} on a GPU, {CPU_MAX_SEQS_PER_BIN} "
                                                        "on CPU)")] = None
    kv_rows: Annotated[PositiveInt | None, opt("TELESUM_KV_ROWS", "KV arena rows (auto: probe, else two full "
                                                                  "bins and at least one context)")] = None
    max_new_tokens: Annotated[int, opt("TELESUM_MAX_NEW_TOKENS", "summary length limit in tokens", gt=0)] = 128
    max_context: Annotated[PositiveInt | None, opt("TELESUM_MAX_CONTEXT",
                                                   "context limit (default: the model's)")] = None
    temperature: Annotated[float, opt("TELESUM_TEMPERATURE", "sampling temperature, 0 = greedy", ge=0)] = 0.0
    top_p: Annotated[float, opt("TELESUM_TOP_P", "nucleus sampling mass", gt=0, le=1)] = 1.0
    seed: Annotated[int, opt("TELESUM_SEED", "sampling seed", ge=0)] = 0
    prefix_cache: Annotated[bool, opt("TELESUM_PREFIX_CACHE", "reuse the KV of prompt heads shared with "
                                                              "recent prompts (prefill only the rest)")] = True
    mixed_steps: Annotated[bool, opt("TELESUM_MIXED_STEPS", "prefill a bin in the same forward as the "
                                                            "decoding sequences' next tokens, a large bin in "
                                                            "step-sized parts (see docs/streaming.md)")] = False
    gil_switch_ms: Annotated[PositiveFloat | None, opt(
        "TELESUM_GIL_SWITCH_MS", "the interpreter's GIL switch interval while the summarizer serves, in ms: how "
                                 "long the GPU loop may wait for the GIL another thread holds (auto: "
                                 f"{GPU_GIL_SWITCH_MS:g} on a GPU, Python's own on CPU)")] = None
    prefix_cache_tokens: Annotated[PositiveInt | None, opt(
        "TELESUM_PREFIX_CACHE_TOKENS", "prompt tokens whose KV the prefix cache may hold, in KV rows kept "
                                       "beside the slabs (auto: a sixteenth of the arena, at most "
                                       f"{PREFIX_CACHE_MAX_ROWS})")] = None
    max_record_tokens: Annotated[NonNegativeInt | None, opt(
        "TELESUM_MAX_RECORD_TOKENS", "per-record work cap in body tokens (0: none; else at least "
                                     f"{MIN_WORK_CAP_TOKENS}); see --over-cap (auto: {GPU_WORK_CAP_TOKENS} on a "
                                     f"GPU; on CPU the body tokens it prefills in {CPU_WORK_CAP_S:g} s, measured "
                                     "at start-up)")] = None
    over_cap: Annotated[OverCap, opt(
        "TELESUM_OVER_CAP", "a record over the work cap: 'select' summarises its head, tail and line-template "
                            "counts (stated in the Summary's `selection`), 'dead_letter' refuses it as too_long",
    )] = "select"

    def __post_init__(self) -> None:
        self.work_cap()

    def work_cap(self) -> int | None:
        """The per-record work cap in body tokens the operator set (None: no cap, 0 given); the one
        check of the cap and of the policy beyond it (SettingsError; a Struct built in code is not
        type-checked). Unset (auto): `worker.settings.budgets.WorkCap` follows the device."""
        if self.over_cap not in get_args(OverCap):
            raise SettingsError(f"engine.over_cap must be one of {', '.join(get_args(OverCap))}; got {self.over_cap!r}")
        if self.max_record_tokens is not None and 0 < self.max_record_tokens < MIN_WORK_CAP_TOKENS:
            raise SettingsError(f"engine.max_record_tokens (--max-record-tokens, TELESUM_MAX_RECORD_TOKENS) must be "
                                f"0 (no cap) or at least {MIN_WORK_CAP_TOKENS}; got {self.max_record_tokens}")
        return self.max_record_tokens or None


class HttpSettings(MaskedRepr, msgspec.Struct, **_Struct):
    """The worker's HTTP port: /metrics, /healthz, /readyz and the status page."""

    metrics_port: Annotated[int, opt("TELESUM_METRICS_PORT", "serve /metrics, /healthz, /readyz and /status on "
                                                             "this port, 0 = off; with --gpus, child i uses "
                                                             "port + i", ge=0, le=65535)] = 0
    bind_address: Annotated[str, opt("TELESUM_BIND_ADDRESS", "address the HTTP port binds to "
                                                             "(127.0.0.1: this host only)", pattern=r"\S")] = "0.0.0.0"
    status_page: Annotated[bool, opt("TELESUM_STATUS_PAGE", "serve the live status page at /status")] = True
    status_token: Annotated[str | None, opt("TELESUM_STATUS_TOKEN", "bearer token the status page's data "
                                                                    "requires (unset: none)", secret=True)] = None


class LogSettings(MaskedRepr, msgspec.Struct, **_Struct):
    """How the commands log: text or one JSON object per line, and the level."""

    format: Annotated[Literal["text", "json"], opt("TELESUM_LOG_FORMAT", "log lines as text or JSON",
                                                   flag="log-format")] = "text"
    level: Annotated[Literal["debug", "info", "warning", "error"],
                     opt("TELESUM_LOG_LEVEL", "log level (debug adds one line per packed bin)",
                         flag="log-level")] = "info"


class Settings(msgspec.Struct, **_Struct):
    engine: EngineSettings = msgspec.field(default_factory=EngineSettings)
    kafka: KafkaSettings = msgspec.field(default_factory=KafkaSettings)
    http: HttpSettings = msgspec.field(default_factory=HttpSettings)
    log: LogSettings = msgspec.field(default_factory=LogSettings)
    incidents: IncidentSettings = msgspec.field(default_factory=IncidentSettings)
    alerting: AlertingSettings = msgspec.field(default_factory=AlertingSettings)


SECTIONS: dict[str, type[msgspec.Struct]] = {"engine": EngineSettings, "kafka": KafkaSettings,
                                             "http": HttpSettings, "log": LogSettings,
                                             "incidents": IncidentSettings, "alerting": AlertingSettings}


def all_fields(sections: tuple[str, ...] | None = None) -> list[FieldSpec]:
    """Every setting (of the named sections), in order."""
    return [f for name, cls in SECTIONS.items() if sections is None or name in sections
            for f in section_fields(name, cls)]
