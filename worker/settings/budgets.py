"""The engine's budgets in force: what the operator set, else what the probe found, else the device's default.

`telesum worker` and `telesum summarize` both call `resolve_budgets` once the device is known; the
start-up banner prints each budget with the `source` recorded here. The settings object itself is
never changed: a value discovered at run time is returned, not written back.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Protocol

if TYPE_CHECKING:
    from worker.settings.load import LoadedSettings

# The packing defaults, written once on the Python side; native/dispatcher.h (DispatcherConfig)
# holds the same values for the native side and tests/settings/test_budgets.py checks they agree.
# Measured on an H200 with the SmolLM2-135M shape: 65,536-token bins of up to 1,024 sequences
# served ~100 records/s where 8,192 / 64 served 13 (2026-12-01; docs/engine.md, Budgets).
GPU_TOKEN_BUDGET = 65536
GPU_MAX_SEQS_PER_BIN = 1024
# CPU prefill of more tokens per pass gains nothing; few sequences keep each CPU step short.
CPU_TOKEN_BUDGET = 2048
CPU_MAX_SEQS_PER_BIN = 16
ALIGNMENT = 16                                # each sequence's span in a bin is a multiple of this
# The oldest waiting sequence makes a bin within this. The engine asks the dispatcher for a bin
# whenever it can admit one, and an ask holds until served, so the cap only bounds a bin nobody asked
# for. At 0.05 s the window packed small bins every 50 ms while the engine held another; each then
# waited its turn and cost a prefill step of its own (see engine/prefill_pacing.py).
LATENCY_CAP_S = 0.5
QUEUE_CAPACITY_TOKENS = 4 * GPU_TOKEN_BUDGET  # tokens waiting in the dispatcher before submit pushes back
# Full bins of work in flight: one decodes while the next is packed (the KV arena's default size and
# the records an offline run keeps in flight).
FULL_BINS_IN_FLIGHT = 2
# The prefix cache's rows at most when left to its default (a sixteenth of the arena): the heads of
# telesum's prompts are ~350-900 tokens per record kind.
PREFIX_CACHE_MAX_ROWS = 65536

BUDGETS = ("token_budget", "max_seqs_per_bin", "kv_rows")

# The per-record work cap (`engine.max_record_tokens`) left unset follows the device: on a GPU the
# body tokens below (the cap before it followed the device: seconds of prefill there); on CPU the
# body tokens the device prefills in CPU_WORK_CAP_S, from a prefill measured at start-up, so that
# one record over it (a 50 MB syslog line) costs a 2-core machine about three times that in all:
# planning its selection, prefilling and decoding its pieces, the merge.
GPU_WORK_CAP_TOKENS = 131072
CPU_WORK_CAP_S = 10.0
# The GIL switch interval while serving on a GPU (Python's default is 5 ms). The GPU loop gives the GIL
# up in every torch op and every host sync; when another thread (results, the pool's answers, the
# feeder) is running Python, taking it back waits up to this long. Alternated on an H100 (SmolLM2
# shape, 64 tokens, in one process): 5 ms 637 and 621 records/s, 0.5 ms 642 and 637, 0.05 ms 663 and
# 674 (bench/results/gpu/README.md, 2026-12-05).
GPU_GIL_SWITCH_MS = 0.05
# The smallest cap: a selection still holds a head, a tail and a table of line templates.
MIN_WORK_CAP_TOKENS = 1024
# Prompt tokens of the start-up measurement: near where a slow CPU's cap lands, since a token costs
# more the longer its prompt (the embedded model on 2 cores: 116 tokens/s at 512, 64-68 at 1,024
# and 54 at 2,000, all under a load of 10); a few seconds of an idle 2-core machine.
WORK_CAP_PROBE_TOKENS = 1024


@dataclass(frozen=True)
class WorkCap:
    """The per-record work cap in force (None: no cap) and where it came from."""

    tokens: int | None
    source: str   # "env TELESUM_MAX_RECORD_TOKENS", "default for cuda", "measured on cpu: ... tokens/s x 10 s"

    def describe(self) -> str:
        return f"{self.tokens if self.tokens is not None else 'none'} body tokens ({self.source})"


def device_work_cap(device_type: str) -> WorkCap | None:
    """The unset cap on this device; None on CPU, where it is measured (`cpu_work_cap`)."""
    if device_type == "cuda":
        return WorkCap(GPU_WORK_CAP_TOKENS, "default for cuda")
    return None


def cpu_work_cap(prefill_tokens_per_s: float) -> WorkCap:
    """The cap on a CPU that prefilled this many prompt tokens a second at start-up: what it prefills
    in CPU_WORK_CAP_S, in whole KiB of tokens, between MIN_WORK_CAP_TOKENS and the GPU's cap."""
    tokens = int(prefill_tokens_per_s * CPU_WORK_CAP_S) // 1024 * 1024
    tokens = min(max(tokens, MIN_WORK_CAP_TOKENS), GPU_WORK_CAP_TOKENS)
    return WorkCap(tokens, f"measured on cpu: {prefill_tokens_per_s:,.0f} prompt tokens/s x {CPU_WORK_CAP_S:g} s")


class Probed(Protocol):
    """What a run-time probe reports for one (model, device): the largest safe budgets
    (`worker.probe.ProbeResult`)."""

    token_budget: int
    kv_rows: int
    max_decode_seqs: int  # sequences in flight at once, not per bin


@dataclass(frozen=True)
class Budgets:
    token_budget: int
    max_seqs_per_bin: int
    kv_rows: int | None            # None: the Summarizer sizes the arena (two full bins, >= one context)
    sources: dict[str, str]        # budget name -> "env TELESUM_TOKEN_BUDGET" | "probe" | "default for cuda" | ...
    max_decode_seqs: int | None = None  # sequences decoding at once, as the probe measured; None: not probed
    # The per-record work cap: the operator's or the GPU's; None: the Summarizer takes
    # `engine.max_record_tokens` when set, else measures it on CPU at start-up.
    work_cap: WorkCap | None = None

    def describe(self) -> str:
        """'token_budget=65536 (default for cuda), max_seqs_per_bin=1024 (...), kv_rows=auto (...)'."""
        return ", ".join(f"{name}={getattr(self, name) if getattr(self, name) is not None else 'auto'} "
                         f"({self.sources[name]})" for name in BUDGETS)


def device_defaults(device_type: str) -> dict[str, int | None]:
    if device_type == "cuda":
        return {"token_budget": GPU_TOKEN_BUDGET, "max_seqs_per_bin": GPU_MAX_SEQS_PER_BIN, "kv_rows": None}
    return {"token_budget": CPU_TOKEN_BUDGET, "max_seqs_per_bin": CPU_MAX_SEQS_PER_BIN, "kv_rows": None}


def resolve_budgets(loaded: "LoadedSettings", device_type: str, probed: Probed | None = None) -> Budgets:
    """Per budget: the operator's value (flag/env/file), else the probe's, else the device default.

    `probed` is the run-time probe's result for this (model, device), or None where no probe ran;
    it replaces only the budgets the operator left unset.
    """
    engine = loaded.settings.engine
    defaults = device_defaults(device_type)
    values: dict[str, int | None] = {}
    sources: dict[str, str] = {}
    for name in BUDGETS:
        path = f"engine.{name}"
        if loaded.is_set(path):
            values[name], sources[name] = getattr(engine, name), loaded.source(path)
        elif probed is not None:
            values[name], sources[name] = _probed_value(probed, name), "probe"
        else:
            values[name] = defaults[name]
            sources[name] = (f"default for {device_type}" if defaults[name] is not None
                             else "derived: two full bins, at least one context")
    work_cap = (WorkCap(engine.work_cap(), loaded.source("engine.max_record_tokens"))
                if loaded.is_set("engine.max_record_tokens") else device_work_cap(device_type))
    return Budgets(values["token_budget"], values["max_seqs_per_bin"], values["kv_rows"], sources,
                   probed.max_decode_seqs if probed is not None else None, work_cap)


def _probed_value(probed: Probed, name: str) -> int:
    # The probe measures sequences in flight, not per bin: a bin never holds more than can be in
    # flight at once, nor more than the GPU default (the probe runs only on a GPU).
    if name == "max_seqs_per_bin":
        return min(probed.max_decode_seqs, GPU_MAX_SEQS_PER_BIN)
    return getattr(probed, name)
