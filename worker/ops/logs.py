"""Logging set up from the `[log]` settings: text lines, or one JSON object per line."""

from __future__ import annotations

import contextlib
import logging
import sys
import time
from collections.abc import Iterator

import msgspec

from worker.control_chars import escape_controls
from worker.settings.sections import LogSettings

# LogRecord attributes that are not a caller's `extra=` fields.
_STANDARD = frozenset(vars(logging.LogRecord("", 0, "", 0, "", (), None))) | {"message", "asctime", "taskName"}
TEXT_FORMAT = "%(asctime)s %(levelname)s %(name)s: %(message)s"


@contextlib.contextmanager
def startup_phase(name: str, logger: logging.Logger | None = None) -> Iterator[None]:
    """Logs how long one start-up phase took (see log_startup_phase) when it ends without an error."""
    started = time.perf_counter()
    yield
    log_startup_phase(name, started, logger)


def log_startup_phase(name: str, started: float, logger: logging.Logger | None = None) -> None:
    """"start-up: model loaded in 8.1 s" since `started` (perf_counter), with the phase and its seconds
    as fields of a JSON line; `bench/gpu_stream.py` reads these lines."""
    seconds = time.perf_counter() - started
    (logger or logging.getLogger(__name__)).info(
        "start-up: %s in %.1f s", name, seconds, extra={"startup_phase": name, "seconds": round(seconds, 3)})


class JsonFormatter(logging.Formatter):
    """{"ts", "level", "logger", "message" (control characters escaped), then any `extra=` fields,
    "exc" for a traceback}."""

    def __init__(self, static: dict[str, str] | None = None) -> None:
        super().__init__()
        self.static = static or {}

    def format(self, record: logging.LogRecord) -> str:
        out = {"ts": time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(record.created))
                     + f".{int(record.msecs):03d}Z",
               "level": record.levelname.lower(), "logger": record.name,
               "message": escape_controls(record.getMessage()),
               **self.static}
        for key, value in vars(record).items():
            if key not in _STANDARD and not key.startswith("_"):
                out[key] = value
        if record.exc_info:
            out["exc"] = self.formatException(record.exc_info)
        return msgspec.json.encode(out, enc_hook=str).decode()


class TextFormatter(logging.Formatter):
    """TEXT_FORMAT with the message's control characters escaped: input text quoted in a log line
    (a dead letter's reason) can neither drive the reader's terminal nor start a forged line."""

    def __init__(self) -> None:
        super().__init__(TEXT_FORMAT)

    def formatMessage(self, record: logging.LogRecord) -> str:
        record.message = escape_controls(record.message)
        return super().formatMessage(record)


def configure_logging(settings: LogSettings, **static: str) -> None:
    """Replace the root handler: level and format from `settings`; `static` fields (e.g. worker)
    go on every JSON line. kafka-python's per-connection INFO lines show only at debug, its own
    debug lines never (they would drown the worker's)."""
    root = logging.getLogger()
    for handler in list(root.handlers):  # basicConfig's handler or ours; others (e.g. a test's) stay
        if type(handler) is logging.StreamHandler:
            root.removeHandler(handler)
    handler = logging.StreamHandler(sys.stderr)
    handler.setFormatter(JsonFormatter(static) if settings.format == "json" else TextFormatter())
    root.addHandler(handler)
    root.setLevel(settings.level.upper())
    logging.getLogger("kafka").setLevel(logging.INFO if settings.level == "debug" else logging.WARNING)
