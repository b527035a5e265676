"""The probe's cache: one JSON file per (GPU, memory, model shape, dtype, torch, probe inputs, graphs).

Files live in `$TELESUM_CACHE_DIR/probe`, else `$XDG_CACHE_HOME/telesum/probe`, else
`~/.cache/telesum/probe`. An entry is used only when it parses, every field has the right type and
a sane value, its key equals the one asked for, and the device's free memory now is within
`FREE_TOLERANCE` of the device's total of what it was when that probe started (another process on
the GPU, or more of this one loaded first, makes old budgets unsafe or wasteful). Both figures are
taken at the same point: after the model is loaded, before any pass has run. Anything else is
re-probed.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import logging
import os
import re
from pathlib import Path

from worker.settings.cache import cache_root

log = logging.getLogger(__name__)

CACHE_VERSION = 4       # bump when what the probe measures, how, or the entry's field names change
FREE_TOLERANCE = 0.02   # of the device's memory: free memory may differ this much from the probe's
_INT_FIELDS = ("token_budget", "kv_rows", "max_decode_seqs", "peak_bytes", "bin_limit", "free_bytes",
               "decode_graph_bytes", "prefill_graph_bytes", "headroom_bytes", "seq_tokens")


def default_cache_dir() -> Path:
    return cache_root() / "probe"


def model_fingerprint(cfg) -> str:
    """A short hash of the model's shape (what memory depends on; weight values do not matter)."""
    fields = dataclasses.asdict(cfg)
    return hashlib.sha256(json.dumps(fields, sort_keys=True, default=str).encode()).hexdigest()[:16]


def cache_key(*, gpu_name: str, total_bytes: int, model: str, model_shape: str, dtype: str,
              torch_version: str, max_new_tokens: int, typical_prompt_tokens: int,
              bin_tokens: int | None, decode_graphs: bool = True, prefill_graphs: bool = False,
              prefill_graph_seqs: int | None = None, allocator: str = "") -> dict:
    """decode_graphs/prefill_graphs: which CUDA graphs the worker holds (the probe leaves room for them);
    prefill_graph_seqs: the sequences a bin's prefill graphs hold logits for (None: prefill graphs off);
    allocator: torch's allocator settings (`worker.settings.allocator`): growable segments fit more rows."""
    return {"version": CACHE_VERSION, "gpu_name": gpu_name, "total_bytes": total_bytes, "model": model,
            "model_shape": model_shape, "dtype": dtype, "torch_version": torch_version,
            "max_new_tokens": max_new_tokens, "typical_prompt_tokens": typical_prompt_tokens,
            "bin_tokens": bin_tokens, "decode_graphs": decode_graphs, "prefill_graphs": prefill_graphs,
            "prefill_graph_seqs": prefill_graph_seqs, "allocator": allocator}


def cache_path(directory: Path, key: dict) -> Path:
    digest = hashlib.sha256(json.dumps(key, sort_keys=True).encode()).hexdigest()[:16]
    slug = re.sub(r"[^A-Za-z0-9]+", "-", f"{key['gpu_name']}-{key['model']}").strip("-")[:80]
    return directory / f"{slug}-{digest}.json"


def load_entry(path: Path, key: dict, *, free_bytes: int) -> dict | None:
    """The cached budgets (a dict of the probe's figures) for `key`, or None with the reason logged."""
    if not path.exists():
        return None
    try:
        entry = json.loads(path.read_text())
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as exc:
        log.warning("probe cache %s is unreadable (%s): probing again", path, exc)
        return None
    problem = _check(entry, key, free_bytes)
    if problem:
        log.warning("probe cache %s not used (%s): probing again", path, problem)
        return None
    return entry["budgets"]


def store_entry(path: Path, key: dict, budgets: dict, *, free_at_start_bytes: int) -> None:
    """Write atomically (a torn file from a crash is never read as an entry). Errors are logged, not raised:
    a read-only cache folder costs a re-probe next time, nothing else."""
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
        entry = {"key": key, "budgets": budgets, "free_at_start_bytes": free_at_start_bytes}
        tmp.write_text(json.dumps(entry, indent=2, sort_keys=True))
        os.replace(tmp, path)
    except OSError as exc:
        log.warning("could not write the probe cache %s: %s", path, exc)


def _check(entry, key: dict, free_bytes: int) -> str | None:
    if not isinstance(entry, dict) or not isinstance(entry.get("budgets"), dict):
        return "not a probe cache entry"
    if entry.get("key") != key:
        return "it was probed for another GPU, model, dtype, torch version, graph setting or probe version"
    b = entry["budgets"]
    for name in _INT_FIELDS:
        value = b.get(name)
        if type(value) is not int or value < 0:
            return f"field {name!r} is {value!r}, not a non-negative integer"
    for name in ("token_budget", "kv_rows", "max_decode_seqs"):
        if b[name] < 1:
            return f"field {name!r} is {b[name]}"
    if b["kv_rows"] < b["token_budget"]:
        return f"kv_rows {b['kv_rows']} is below token_budget {b['token_budget']}"
    for name in ("seconds", "warmup_seconds"):
        value = b.get(name)
        if type(value) not in (int, float) or value < 0:
            return f"field {name!r} is {value!r}"
    then = entry.get("free_at_start_bytes")
    if type(then) is not int or then < 0:
        return f"field 'free_at_start_bytes' is {then!r}"
    if abs(free_bytes - then) > FREE_TOLERANCE * key["total_bytes"]:
        return f"{free_bytes / 2**30:.1f} GiB of device memory is free now, {then / 2**30:.1f} GiB was when probed"
    return None
