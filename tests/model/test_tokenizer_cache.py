"""The GGUF tokenizer converted once and then read from telesum's cache; generic folders loaded without AutoTokenizer."""

from __future__ import annotations

import json
import logging
import os

import pytest

from worker.model import embedded_model_path
from worker.model.tokenizer import gguf_cache_folder, load_tokenizer

TEXTS = [
    "<14>1 2026-12-01T03:12:45.120Z gnb-du-17 du-mgr 2211 ALARM [oran@1 cell=\"7\"] linkDown eth0 (S1-U)",
    '{"event":{"commonEventHeader":{"domain":"fault","sourceName":"ru-3"},"faultFields":{"alarmCondition":"LOS"}}}',
    "  tabs\tand\nnew lines\r\n ümlaut · 日本語 · 🙂 · <|im_end|> in the text",
]
MESSAGES = [{"role": "system", "content": "Summarise the alarm."}, {"role": "user", "content": TEXTS[0]}]


def _same_tokenizer(a, b) -> None:
    assert type(a) is type(b) and len(a) == len(b)
    assert (a.bos_token_id, a.eos_token_id, a.pad_token_id) == (b.bos_token_id, b.eos_token_id, b.pad_token_id)
    assert a.apply_chat_template(MESSAGES, add_generation_prompt=True, tokenize=False) == \
        b.apply_chat_template(MESSAGES, add_generation_prompt=True, tokenize=False)
    for text in TEXTS:
        assert a(text, add_special_tokens=False)["input_ids"] == b(text, add_special_tokens=False)["input_ids"]


@pytest.fixture(scope="module")
def cache_dir(tmp_path_factory):
    return tmp_path_factory.mktemp("telesum-cache")


@pytest.fixture(scope="module")
def converted(cache_dir):
    """The embedded GGUF's tokenizer as transformers converts it, the conversion saved under cache_dir."""
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("TELESUM_CACHE_DIR", str(cache_dir))
        return load_tokenizer(embedded_model_path())


@pytest.fixture
def no_conversion(monkeypatch):
    """AutoTokenizer.from_pretrained made to fail: a load that passes did not go through it."""
    def refuse(*args, **kwargs):
        raise AssertionError(f"AutoTokenizer.from_pretrained called with {args} {kwargs}")

    monkeypatch.setattr("transformers.AutoTokenizer.from_pretrained", refuse)


def test_gguf_tokenizer_is_converted_once_then_read_from_the_cache(converted, cache_dir, monkeypatch, no_conversion):
    monkeypatch.setenv("TELESUM_CACHE_DIR", str(cache_dir))
    entry = gguf_cache_folder(embedded_model_path())
    assert entry.parent == cache_dir / "tokenizer" and (entry / "tokenizer.json").is_file()
    assert os.listdir(entry.parent) == [entry.name]  # no half-written copy left beside it
    _same_tokenizer(load_tokenizer(embedded_model_path()), converted)


def test_a_damaged_cache_entry_is_converted_again_and_replaced(converted, tmp_path, monkeypatch):
    monkeypatch.setenv("TELESUM_CACHE_DIR", str(tmp_path))
    entry = gguf_cache_folder(embedded_model_path())
    entry.mkdir(parents=True)
    (entry / "tokenizer.json").write_text('{"truncated": ')
    (entry / "tokenizer_config.json").write_text(json.dumps({"tokenizer_class": "TokenizersBackend"}))
    calls = []
    monkeypatch.setattr("transformers.AutoTokenizer.from_pretrained",
                        lambda *a, **k: calls.append((a, k)) or converted)
    assert load_tokenizer(embedded_model_path()) is converted
    assert len(calls) == 1 and calls[0][1]["gguf_file"] == embedded_model_path().name
    monkeypatch.setattr("transformers.AutoTokenizer.from_pretrained", lambda *a, **k: pytest.fail("converted twice"))
    _same_tokenizer(load_tokenizer(embedded_model_path()), converted)


def test_an_unwritable_cache_costs_only_the_conversion(converted, tmp_path, monkeypatch, caplog):
    not_a_folder = tmp_path / "cache"
    not_a_folder.write_text("a file where the cache folder should be")
    monkeypatch.setenv("TELESUM_CACHE_DIR", str(not_a_folder))
    monkeypatch.setattr("transformers.AutoTokenizer.from_pretrained", lambda *a, **k: converted)
    with caplog.at_level(logging.WARNING, logger="worker.model.tokenizer"):
        assert load_tokenizer(embedded_model_path()) is converted
    assert "not writable" in caplog.text and str(not_a_folder) in caplog.text


def test_the_cache_key_follows_the_file_and_transformers(tmp_path, monkeypatch):
    monkeypatch.setenv("TELESUM_CACHE_DIR", str(tmp_path / "c"))
    model = tmp_path / "m.gguf"
    model.write_bytes(b"v1")
    first = gguf_cache_folder(model)
    assert first.parent == tmp_path / "c" / "tokenizer" and first.name.startswith("m-")
    assert gguf_cache_folder(model) == first
    os.utime(model, ns=(0, 10**9))
    touched = gguf_cache_folder(model)
    model.write_bytes(b"v2 longer")
    replaced = gguf_cache_folder(model)
    monkeypatch.setattr("transformers.__version__", "0.0.0")  # the module the code imports
    upgraded = gguf_cache_folder(model)
    assert len({first, touched, replaced, upgraded}) == 4


def test_a_generic_folder_loads_without_autotokenizer(converted, tmp_path, no_conversion):
    converted.save_pretrained(tmp_path)
    assert json.loads((tmp_path / "tokenizer_config.json").read_text())["tokenizer_class"] in \
        ("TokenizersBackend", "PreTrainedTokenizerFast")
    _same_tokenizer(load_tokenizer(tmp_path), converted)


def test_a_model_specific_folder_still_goes_through_autotokenizer(converted, tmp_path, monkeypatch):
    converted.save_pretrained(tmp_path)
    config = json.loads((tmp_path / "tokenizer_config.json").read_text())
    (tmp_path / "tokenizer_config.json").write_text(json.dumps({**config, "tokenizer_class": "GPT2Tokenizer"}))
    calls = []
    monkeypatch.setattr("transformers.AutoTokenizer.from_pretrained", lambda *a, **k: calls.append(a) or converted)
    assert load_tokenizer(tmp_path) is converted and calls == [(str(tmp_path),)]
