"""The Llama-family model runtime: config, KV tapes, attention backends, weights loading."""

from worker.model.attention import AttentionBackend, AttentionMetadata, build_pass, select_backend
from worker.model.config import ModelConfig
from worker.model.kv_cache import KVCache
from worker.model.llama import LlamaModel
from worker.model.loader import LoadedModel, embedded_model_path, load_model, random_model, use_fp8_weights

__all__ = [
    "AttentionBackend", "AttentionMetadata", "KVCache", "LlamaModel", "LoadedModel", "ModelConfig",
    "build_pass", "embedded_model_path", "load_model", "random_model", "select_backend",
    "use_fp8_weights",
]
