"""`telesum summarize` on a tiny random model: order, resume, rejects with line numbers."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch

import worker.model
import worker.model.tokenizer
from worker.cli import main
from worker.model.attention import SdpaBackend
from worker.model.loader import LoadedModel
from worker.model.config import ModelConfig
from worker.model.llama import LlamaModel

from tests.engine.tiny_tokenizer import tiny_tokenizer


@pytest.fixture
def tiny_loaded(monkeypatch):
    cfg = ModelConfig.tiny(vocab_size=259, max_position_embeddings=4096, eos_token_ids=(2,))
    torch.manual_seed(2)
    loaded = LoadedModel(model=LlamaModel(cfg, SdpaBackend()).eval(), config=cfg, tokenizer=tiny_tokenizer(),
                         name="tiny-random", device=torch.device("cpu"), dtype=torch.float32)
    calls = []
    monkeypatch.setattr(worker.model, "load_model", lambda src, **kw: calls.append(src) or loaded)
    # loaded before the model, on its own (the preprocessing pool starts with it)
    monkeypatch.setattr(worker.model.tokenizer, "load_tokenizer", lambda src: loaded.tokenizer)
    return calls


def _line(i: int) -> str:
    return json.dumps({"id": f"rec-{i}", "kind": "syslog", "source": "gnb-3",
                       "body": f"<11>1 2026-11-29T10:00:0{i % 10}Z cell{i} ran - - - S1 link down {i}"})


def _run(tmp_path: Path, lines: list[str], *extra: str) -> tuple[int, list[dict], list[dict]]:
    src, out = tmp_path / "in.jsonl", tmp_path / "out.jsonl"
    src.write_text("\n".join(lines) + "\n")
    rc = main(["summarize", str(src), "-o", str(out), "--max-new-tokens", "4", "--token-budget", "1024",
               "--device", "cpu", "--no-progress", *extra])
    read = lambda p: [json.loads(x) for x in p.read_text().splitlines()] if p.exists() else []  # noqa: E731
    return rc, read(out), read(tmp_path / "out.jsonl.rejects.jsonl")


def test_summarize_cli_writes_one_line_per_record_in_input_order(tmp_path, tiny_loaded):
    rc, out, rejects = _run(tmp_path, [_line(i) for i in range(7)])
    assert rc == 0 and rejects == []
    assert [o["id"] for o in out] == [f"rec-{i}" for i in range(7)]
    for o in out:
        assert o["model"] == "tiny-random" and o["prompt_tokens"] > 0 and 1 <= o["output_tokens"] <= 4
        assert isinstance(o["summary"], str) and set(o["timings"]) >= {"queued_s", "prefill_s", "decode_s"}
    assert len(tiny_loaded) == 1 and str(tiny_loaded[0]).endswith(".gguf")  # the embedded default


def test_summarize_cli_with_fp8_weights_quantises_the_projections_and_summarises(tmp_path, tiny_loaded, caplog):
    caplog.set_level("INFO")
    rc, out, rejects = _run(tmp_path, [_line(i) for i in range(4)], "--dtype", "fp8")
    assert rc == 0 and rejects == [] and [o["id"] for o in out] == [f"rec-{i}" for i in range(4)]
    assert all(1 <= o["output_tokens"] <= 4 for o in out)
    assert "FP8 weights: 8 projections quantised" in caplog.text  # 2 layers x (qkv, o, gate_up, down)
    assert "(fp8), attention" in caplog.text  # the banner names what runs


def test_summarize_cli_fp8_on_a_gpu_without_fp8_exits_2_naming_the_setting(tmp_path, tiny_loaded, caplog,
                                                                             monkeypatch):
    monkeypatch.setattr(torch.cuda, "get_device_capability", lambda device=None: (8, 0))
    monkeypatch.setattr(torch.cuda, "get_device_name", lambda device=None: "NVIDIA A100-SXM4-80GB")
    src = tmp_path / "in.jsonl"
    src.write_text(_line(0) + "\n")
    rc = main(["summarize", str(src), "-o", str(tmp_path / "out.jsonl"), "--dtype", "fp8", "--device", "cuda",
               "--no-progress"])
    assert rc == 2 and "engine.dtype (--dtype, TELESUM_DTYPE) 'fp8'" in caplog.text and "A100" in caplog.text
    assert tiny_loaded == []  # refused before the weights were read


def test_summarize_cli_resume_skips_done_ids(tmp_path, tiny_loaded):
    lines = [_line(i) for i in range(6)]
    _run(tmp_path, lines[:3])
    first = (tmp_path / "out.jsonl").read_text()
    with (tmp_path / "out.jsonl").open("a") as fh:
        fh.write('{"id": "rec-9", "summ')  # a torn line from a crash mid-write
    rc, out, _ = _run(tmp_path, lines)
    assert rc == 0
    assert (tmp_path / "out.jsonl").read_text().startswith(first)
    assert [o["id"] for o in out] == [f"rec-{i}" for i in range(6)]  # 0-2 kept, 3-5 appended once


def test_summarize_cli_bad_lines_go_to_rejects_with_line_numbers(tmp_path, tiny_loaded):
    lines = [_line(0), "{not json", _line(2), json.dumps({"id": "x", "kind": "nope", "body": "b"}),
             json.dumps({"id": "y", "kind": "text", "body": "  "}), _line(5)]
    rc, out, rejects = _run(tmp_path, lines)
    assert rc == 1
    assert [o["id"] for o in out] == ["rec-0", "rec-2", "rec-5"]
    assert [(r["line"], r["reason"]) for r in rejects] == [(2, "invalid_json"), (4, "invalid_field"), (5, "empty_body")]
    assert rejects[0]["original"] == "{not json"
    rc, out, rejects = _run(tmp_path, lines)  # a rerun neither repeats work nor re-reports
    assert rc == 0 and len(out) == 3 and len(rejects) == 3


def test_summarize_cli_missing_model_exits_2_naming_the_setting(tmp_path, caplog):
    src = tmp_path / "in.jsonl"
    src.write_text(_line(0) + "\n")
    rc = main(["summarize", str(src), "-o", str(tmp_path / "out.jsonl"), "--model", str(tmp_path / "nope.gguf"),
               "--device", "cpu", "--no-progress"])
    assert rc == 2 and "engine.model (--model, TELESUM_MODEL)" in caplog.text and "does not exist" in caplog.text


def test_summarize_cli_bad_setting_exits_2_before_loading(tmp_path, tiny_loaded, caplog):
    src = tmp_path / "in.jsonl"
    src.write_text(_line(0) + "\n")
    rc = main(["summarize", str(src), "-o", str(tmp_path / "out.jsonl"), "--max-seqs-per-bin", "0"])
    assert rc == 2 and "engine.max_seqs_per_bin (--max-seqs-per-bin" in caplog.text and tiny_loaded == []


def test_summarize_cli_reports_the_share_served_from_the_prefix_cache(tmp_path, tiny_loaded, caplog):
    caplog.set_level("INFO", logger="worker.commands.summarize")
    rc, out, _ = _run(tmp_path, [_line(i) for i in range(6)])
    assert rc == 0 and len(out) == 6
    line = next(r.getMessage() for r in caplog.records if "prefix cache:" in r.getMessage())
    hit, looked_up = (int(x) for x in line.split("(")[1].split(")")[0].split(" of "))
    assert looked_up == sum(o["prompt_tokens"] for o in out)  # every prompt was looked up, once
    assert 0 <= hit < looked_up and "% of prompt tokens served" in line
