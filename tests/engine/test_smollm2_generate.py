"""Greedy output of the engine equals transformers `generate` on the real SmolLM2, token for token."""

import numpy as np
import pytest
import torch

from worker.dispatch import BinDispatcher
from worker.engine.engine import Engine
from worker.engine.kv_arena import KVArena
from worker.engine.runner import ModelRunner
from worker.engine.sequence import SamplingParams

from tests.engine.helpers import run_until_done

MAX_NEW = 12
QUESTIONS = [
    "Summarise: eNB-12 cell 3 lost S1 link at 10:02Z, restored at 10:07Z.",
    "What is an alarm?",
    "Syslog from gnb-7: <11>1 2026-11-29T10:00:00Z gnb-7 rrc - - - RRC setup failure rate 35% on cell 4, "
    "threshold 5%, severity MAJOR. Explain in one sentence.",
]


def _transformers_twin(ours):
    """A transformers LlamaForCausalLM holding our loaded weights (saves dequantising the GGUF twice;
    the loader's own parity with transformers is the model tests' business)."""
    from transformers import AutoConfig, AutoModelForCausalLM

    cfg = ours.config
    raw = cfg.to_hf_config()
    hf = AutoModelForCausalLM.from_config(AutoConfig.for_model(raw.pop("model_type"), **raw),
                                          dtype=torch.float32, attn_implementation="sdpa").eval()
    state = {}
    for name, tensor in ours.model.state_dict().items():
        if ".qkv_proj." in name:
            q, k, v = tensor.split([cfg.q_size, cfg.kv_size, cfg.kv_size])
            for part, t in zip("qkv", (q, k, v)):
                state["model." + name.replace("qkv_proj", f"{part}_proj")] = t
        elif ".gate_up_proj." in name:
            gate, up = tensor.chunk(2)
            state["model." + name.replace("gate_up_proj", "gate_proj")] = gate
            state["model." + name.replace("gate_up_proj", "up_proj")] = up
        elif name.startswith("lm_head."):
            state[name] = tensor
        else:
            state["model." + name] = tensor
    missing, unexpected = hf.load_state_dict(state, strict=False)
    assert not unexpected and set(missing) <= {"lm_head.weight"}, (missing, unexpected)
    return hf


@pytest.mark.slow
def test_engine_greedy_equals_transformers_generate_on_smollm2():
    from worker.model import embedded_model_path, load_model

    path = embedded_model_path()
    ours = load_model(path, device="cpu")
    tok = ours.tokenizer
    prompts = [tok(tok.apply_chat_template([{"role": "user", "content": q}], add_generation_prompt=True,
                                           tokenize=False), add_special_tokens=False)["input_ids"] for q in QUESTIONS]
    hf = _transformers_twin(ours)
    expected = []
    for p in prompts:
        out = hf.generate(torch.tensor([p]), attention_mask=torch.ones(1, len(p), dtype=torch.long),
                          max_new_tokens=MAX_NEW, do_sample=False, pad_token_id=tok.pad_token_id)[0, len(p):].tolist()
        eos = set(ours.config.eos_token_ids)
        expected.append([t for t in out[:next((i for i, t in enumerate(out) if t in eos), len(out))]])
    del hf

    dispatcher = BinDispatcher(1024, alignment=16, num_slots=2, max_seqs_per_bin=8)
    arena = KVArena(ours.config, 2048, dtype=torch.float32, device="cpu")
    engine = Engine(ModelRunner(ours.model, arena.cache, "cpu"), dispatcher, arena.slabs,
                    eos_ids=ours.config.eos_token_ids, max_context=ours.config.max_position_embeddings)
    dispatcher.start()
    seqs = [engine.add(p, SamplingParams(max_new_tokens=MAX_NEW)) for p in prompts]
    run_until_done(engine, seqs)
    dispatcher.close()
    assert [s.output for s in seqs] == expected
    assert all(len(e) >= 3 for e in expected)  # real text, not an immediate EOS
