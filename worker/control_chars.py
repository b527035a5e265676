"""Text from the outside made safe to keep, print and encode.

An input can carry terminal escape sequences (`ESC[2J` clears an operator's screen), NUL and other
control characters, and, through a JSON parser that allows them, lone UTF-16 surrogates that no
UTF-8 encoder accepts. `clean_text` is applied where a log line becomes a record, so summaries,
the status page and the answers never carry them; `escape_controls` where text is written to a log.
"""

from __future__ import annotations

import re

# CSI (`ESC [ … final`), OSC (`ESC ] … BEL|ESC \`) and two-character escape sequences (`ESC c` resets).
_ESCAPE_SEQUENCE = re.compile(r"\x1b(?:\[[0-?]*[ -/]*[@-~]|\][^\x07\x1b]*(?:\x07|\x1b\\)?|[0-~])")
# C0 controls but tab and newline, DEL and the C1 controls.
_CONTROL = re.compile(r"[\x00-\x08\x0b-\x1f\x7f-\x9f]")
_SURROGATE = re.compile(r"[\ud800-\udfff]")
REPLACEMENT = "\ufffd"


def clean_text(text: str) -> str:
    """`text` without escape sequences; other control characters (not tab or newline) removed,
    lone surrogates replaced by U+FFFD."""
    if text.isprintable():
        return text
    text = _ESCAPE_SEQUENCE.sub("", text)
    text = _CONTROL.sub("", text)
    return _SURROGATE.sub(REPLACEMENT, text)


def escape_controls(text: str) -> str:
    """`text` with every control character (newlines too) and lone surrogate written as a visible
    escape (`\\x1b`, `\\n`, `\\ud800`): one log line stays one line and cannot drive a terminal."""
    if text.isprintable():
        return text
    return re.sub(r"[\x00-\x1f\x7f-\x9f\ud800-\udfff]",
                  lambda m: m.group().encode("unicode_escape", "backslashreplace").decode("ascii"), text)
