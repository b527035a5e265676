"""From the `[engine]` settings to a running Summarizer, the same way for `telesum worker` and
`telesum summarize`: device, model, budgets (operator > probe > device default), dispatcher, banner."""

from __future__ import annotations

import logging
import os
import threading
from typing import Any

from worker.ops.logs import startup_phase as _startup_phase
from worker.settings.budgets import GPU_MAX_SEQS_PER_BIN, GPU_TOKEN_BUDGET, Budgets, Probed, resolve_budgets
from worker.settings.fields import SettingsError
from worker.settings.load import LoadedSettings
from worker.settings.sections import EngineSettings

log = logging.getLogger(__name__)


def startup_phase(name: str):
    """Logs how long one start-up phase took, under this module's logger (see worker.ops.logs)."""
    return _startup_phase(name, log)


def resolve_device(name: str):
    import torch

    if name == "auto":
        return torch.device("cuda" if torch.cuda.is_available() else "cpu")
    return torch.device(name)


def use_persistent_compile_caches() -> None:
    """Triton's cache under telesum's cache folder (unless the operator set it), so a restarted worker
    reuses the kernels the last start compiled instead of compiling them again; where that folder is a
    volume, the reuse survives the container too."""
    from worker.settings.cache import cache_root

    os.environ.setdefault("TRITON_CACHE_DIR", str(cache_root() / "triton"))


def tokenizer_source(engine: EngineSettings):
    """Where the tokenizer comes from: `engine.tokenizer`, else the model's own (the embedded GGUF's for
    'embedded' and 'tiny'). Raises FileNotFoundError for a model path that does not exist."""
    from pathlib import Path

    from worker.model.loader import embedded_model_path

    if engine.tokenizer:
        return engine.tokenizer
    if engine.model in ("embedded", "tiny"):
        return embedded_model_path()
    if not Path(engine.model).exists():
        raise FileNotFoundError(f"model source {engine.model} does not exist")
    return engine.model


def load_tokenizer(engine: EngineSettings):
    """The tokenizer `engine` names, loaded on its own so the preprocessing pool can start before the model."""
    from worker.model.tokenizer import load_tokenizer as load

    with startup_phase("tokenizer loaded"):
        return load(tokenizer_source(engine))


def start_preprocessor(tokenizer, engine: EngineSettings):
    """The Summarizer's preprocessing pool for the device, its processes spawning now: they import and
    load their tokenizer copies while the model loads and the Summarizer warms up."""
    import time

    from worker.summarizer.preprocess import Preprocessor, default_workers

    started = time.perf_counter()
    pool = Preprocessor(tokenizer, default_workers(resolve_device(engine.device).type))
    waiting = set(pool.started)
    lock = threading.Lock()  # protects waiting (the callbacks run on the pool's manager thread)

    def up(future) -> None:  # not a phase: it runs beside the engine's warm-up
        if future.cancelled() or future.exception() is not None:
            return  # closed before its processes were up
        with lock:
            waiting.discard(future)
            if waiting:
                return
        log.info("start-up: preprocessing pool of %d processes answering %.1f s after it started",
                 pool.workers, time.perf_counter() - started)

    for future in pool.started:
        future.add_done_callback(up)
    return pool


def load_model(engine: EngineSettings, tokenizer=None):
    """The LoadedModel that `engine.model` names: 'embedded', 'tiny' (random weights) or a path;
    `tokenizer`: already loaded (see load_tokenizer), else loaded here."""
    use_persistent_compile_caches()
    with startup_phase("model loaded"):
        return _load_model(engine, tokenizer)


def _load_model(engine: EngineSettings, tok=None):
    if "fp8" in (engine.dtype, engine.kv_cache):  # checked before minutes of loading, not after
        from worker.model.fp8 import fp8_unsupported

        reason = fp8_unsupported(resolve_device(engine.device))
        for value, name in ((engine.dtype, "engine.dtype (--dtype, TELESUM_DTYPE)"),
                            (engine.kv_cache, "engine.kv_cache (--kv-cache, TELESUM_KV_CACHE)")):
            if value == "fp8" and reason is not None:
                raise SettingsError(f"{name} 'fp8': {reason}")
    from worker.model.loader import use_fp8_kv_cache, use_fp8_weights

    loaded = _load_weights(engine, tok)
    if engine.dtype == "fp8":
        use_fp8_weights(loaded)
    if engine.kv_cache == "fp8":
        try:
            use_fp8_kv_cache(loaded)
        except ValueError as exc:  # the model's head size
            raise SettingsError(f"engine.kv_cache (--kv-cache, TELESUM_KV_CACHE) 'fp8': {exc}") from None
    return loaded


def _load_weights(engine: EngineSettings, tok=None):
    import worker.model
    from worker.model.config import ModelConfig
    from worker.model.loader import embedded_model_path, random_model
    from worker.model.tokenizer import load_tokenizer as load

    device = resolve_device(engine.device)
    if engine.model == "tiny":
        # Random weights for tests and speed runs; the tokenizer decides the vocabulary.
        tok = tok or load(tokenizer_source(engine))
        cfg = ModelConfig.tiny(vocab_size=len(tok), max_position_embeddings=engine.max_context or 2048,
                               bos_token_id=tok.bos_token_id, eos_token_ids=(tok.eos_token_id,))
        loaded = random_model(cfg, device=device, name="tiny-random", backend=engine.backend)
        loaded.tokenizer = tok
        return loaded
    source = embedded_model_path() if engine.model == "embedded" else engine.model
    loaded = worker.model.load_model(source, device=device, backend=engine.backend,
                                     tokenizer=False if tok is not None else engine.tokenizer or True)
    if tok is not None:
        loaded.tokenizer = tok
    return loaded


def probed_bin(engine: EngineSettings, loaded_settings: LoadedSettings) -> tuple[int, int]:
    """The (tokens, sequences) of the largest bin the worker will prefill, as the probe must hold it:
    the operator's values where set, else the GPU defaults (`telesum probe` fills the same entry)."""
    tokens = engine.token_budget if loaded_settings.is_set("engine.token_budget") else GPU_TOKEN_BUDGET
    seqs = engine.max_seqs_per_bin if loaded_settings.is_set("engine.max_seqs_per_bin") else GPU_MAX_SEQS_PER_BIN
    return tokens, seqs


def probe_budgets(loaded, device, engine: EngineSettings, loaded_settings: LoadedSettings) -> Probed | None:
    """The Phase 0 probe's budgets for this (model, device) on a GPU (cached per GPU, model, dtype and
    torch version; probed when there is no valid entry), or None on CPU or when the probe fails.

    The bin is not grown to the probe's limit (millions of tokens for a small model: one such
    prefill would stall every decoding sequence for seconds); it stays at the operator's value or
    the GPU default, and the probe sizes the KV arena and the sequences beside it."""
    if device.type != "cuda":
        return None
    from worker.probe import ProbeError
    from worker.probe import probe_budgets as run_probe

    bin_tokens, bin_seqs = probed_bin(engine, loaded_settings)
    try:
        found = run_probe(loaded, device, max_new_tokens=engine.max_new_tokens, bin_tokens=bin_tokens,
                          bin_seqs=bin_seqs)
    except ProbeError as exc:
        log.warning("probe: %s; using the device defaults", exc)
        return None
    log.info("probe (%s, %.1f s): bin %d tokens, %d KV rows, %d sequences in flight (%s)", found.source,
             found.seconds, found.token_budget, found.kv_rows, found.max_decode_seqs, found.cache_path)
    return found


def budgets_for(loaded_settings: LoadedSettings, loaded) -> Budgets:
    device = next(loaded.model.parameters()).device
    with startup_phase("budgets (probe or its cache)"):
        return resolve_budgets(loaded_settings, device.type,
                           probe_budgets(loaded, device, loaded_settings.settings.engine, loaded_settings))


def build_summarizer(engine: EngineSettings, budgets: Budgets, loaded, dispatcher=None, preprocessor=None):
    """The Summarizer both commands run, with the budgets in force and the engine's sampling.
    preprocessor: see start_preprocessor."""
    from worker.summarizer.summarizer import Summarizer

    return Summarizer(loaded, engine, budgets, dispatcher=dispatcher, preprocessor=preprocessor)


def banner(command: str, loaded, budgets: Budgets, summarizer, **extra: Any) -> None:
    """One INFO line at start-up: model, device, dtype, attention backend and the budgets in force
    with where each came from (a defaulted arena: the rows the Summarizer sized)."""
    backend = loaded.model.backend.name
    dtype = loaded.precision
    arena = summarizer.arena.capacity_rows
    kv = budgets.describe()
    if budgets.kv_rows is None:
        kv = kv.replace("kv_rows=auto", f"kv_rows={arena}")
    kv_cache = "fp8" if loaded.fp8_kv else "model dtype"
    fields = {"command": command, "model": loaded.name, "device": str(loaded.device), "dtype": dtype,
              "kv_cache": kv_cache,
              "attention_backend": backend, "token_budget": budgets.token_budget,
              "max_seqs_per_bin": budgets.max_seqs_per_bin, "kv_rows": arena,
              "budget_sources": budgets.sources, **extra}
    cap = summarizer.work_cap
    fields["work_cap"] = {"tokens": cap.tokens, "source": cap.source} if cap is not None else "measured at start-up"
    log.info("telesum %s: model %s on %s (%s), attention %s, KV cache in %s; budgets: %s; work cap: %s", command,
             loaded.name, loaded.device, dtype, backend, kv_cache, kv,
             cap.describe() if cap is not None else "measured at start-up",
             extra={"banner": fields})
