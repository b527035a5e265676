"""Tokenizer and chat template through transformers, from a Hugging Face folder or a GGUF file."""

from __future__ import annotations

from pathlib import Path

_TOKENIZER_FILES = ("tokenizer.json", "tokenizer_config.json", "tokenizer.model", "vocab.json")


def load_tokenizer(source: str | Path):
    """The transformers tokenizer of a model folder or .gguf file; raises ValueError if it has none or no chat template."""
    from transformers import AutoTokenizer

    source = Path(source)
    if source.is_dir() and not any((source / f).is_file() for f in _TOKENIZER_FILES):
        raise ValueError(f"{source}: no usable tokenizer (none of {', '.join(_TOKENIZER_FILES)})")
    try:
        if source.suffix == ".gguf":
            tok = AutoTokenizer.from_pretrained(str(source.parent), gguf_file=source.name)
        else:
            tok = AutoTokenizer.from_pretrained(str(source))
    except (OSError, ValueError) as exc:
        raise ValueError(f"{source}: no usable tokenizer ({exc})") from exc
    if not getattr(tok, "chat_template", None):
        raise ValueError(f"{source}: the tokenizer has no chat template; an instruct/chat model is needed")
    if tok.pad_token_id is None:
        tok.pad_token = tok.eos_token
    return tok
