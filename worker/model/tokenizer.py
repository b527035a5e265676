"""Tokenizer and chat template through transformers, from a Hugging Face folder or a GGUF file.

Two costs of a start are avoided here (`bench/tokenizer_load.py` measures them):
- A GGUF file's tokenizer is rebuilt from its vocabulary by transformers on every load (seconds). The
  result is saved once as a folder under telesum's cache (`tokenizer/`, keyed by the file's path, size
  and modification time and by transformers' version) and read from there on later starts.
- `AutoTokenizer`'s module imports transformers' auto-model machinery (generation utilities, torch's
  dynamo and distributed tensors). A folder whose tokenizer_config.json names one of the generic
  tokenizer.json classes is loaded through that class directly, which is all AutoTokenizer would do.
"""

from __future__ import annotations

import hashlib
import json
import logging
import os
import shutil
import tempfile
from pathlib import Path

log = logging.getLogger(__name__)

_TOKENIZER_FILES = ("tokenizer.json", "tokenizer_config.json", "tokenizer.model", "vocab.json")
# Classes that read tokenizer.json and nothing model-specific: AutoTokenizer maps these names to
# themselves, so loading them directly gives the same tokenizer without its imports.
_GENERIC_CLASSES = ("TokenizersBackend", "PreTrainedTokenizerFast")


def load_tokenizer(source: str | Path):
    """The transformers tokenizer of a model folder or .gguf file; raises ValueError if it has none or no chat template."""
    source = Path(source)
    if source.is_dir() and not any((source / f).is_file() for f in _TOKENIZER_FILES):
        raise ValueError(f"{source}: no usable tokenizer (none of {', '.join(_TOKENIZER_FILES)})")
    try:
        tok = _from_gguf(source) if source.suffix == ".gguf" else _from_folder(source)
    except (OSError, ValueError) as exc:
        raise ValueError(f"{source}: no usable tokenizer ({exc})") from exc
    if not getattr(tok, "chat_template", None):
        raise ValueError(f"{source}: the tokenizer has no chat template; an instruct/chat model is needed")
    if tok.pad_token_id is None:
        tok.pad_token = tok.eos_token
    return tok


def _from_folder(folder: Path):
    name = _configured_class(folder)
    if name in _GENERIC_CLASSES:
        import transformers

        return getattr(transformers, name).from_pretrained(str(folder))
    from transformers import AutoTokenizer

    return AutoTokenizer.from_pretrained(str(folder))


def _configured_class(folder: Path) -> str | None:
    try:
        return json.loads((folder / "tokenizer_config.json").read_text()).get("tokenizer_class")
    except (OSError, ValueError, AttributeError):
        return None


def _from_gguf(path: Path):
    cached = gguf_cache_folder(path)
    if (cached / "tokenizer.json").is_file():
        try:
            tok = _from_folder(cached)
            log.info("tokenizer of %s read from the cache %s", path.name, cached)
            return tok
        except Exception as exc:  # noqa: BLE001 - a damaged entry (tokenizers raises plain Exception): convert again
            log.warning("tokenizer cache %s unreadable (%s); converting %s again", cached, exc, path.name)
    from transformers import AutoTokenizer

    tok = AutoTokenizer.from_pretrained(str(path.parent), gguf_file=path.name)
    if _save(tok, cached):
        log.info("tokenizer of %s converted from the GGUF file; saved for later starts in %s", path.name, cached)
    return tok


def gguf_cache_folder(path: Path) -> Path:
    """Where the tokenizer converted from the GGUF file `path` is kept: a new file, a replaced one or
    another transformers version gets its own entry."""
    import transformers

    from worker.settings.cache import cache_root

    resolved = path.resolve()
    stat = resolved.stat()
    key = f"{resolved}|{stat.st_size}|{stat.st_mtime_ns}|{transformers.__version__}"
    return cache_root() / "tokenizer" / f"{path.stem}-{hashlib.sha256(key.encode()).hexdigest()[:16]}"


def _save(tok, folder: Path) -> bool:
    """Saves the converted tokenizer as `folder`, whole or not at all (written beside it, then renamed:
    workers starting together on one cache volume never read a half-written entry). A cache that
    cannot be written costs the next start the conversion, nothing else."""
    try:
        folder.parent.mkdir(parents=True, exist_ok=True)
        partial = Path(tempfile.mkdtemp(prefix=f".{folder.name}-", dir=folder.parent))
    except OSError as exc:
        log.warning("tokenizer cache %s not writable (%s): the next start converts the GGUF tokenizer again",
                    folder.parent, exc)
        return False
    try:
        tok.save_pretrained(str(partial))
        shutil.rmtree(folder, ignore_errors=True)  # a damaged entry being replaced
        os.replace(partial, folder)
        return True
    except OSError as exc:  # another worker renamed its copy first, or the disk is full
        log.debug("tokenizer cache %s not saved: %s", folder, exc)
        return False
    finally:
        shutil.rmtree(partial, ignore_errors=True)
