"""The one start-up sequence of the two long-running commands (`telesum worker`, `telesum summarize`):
settings (fail fast, naming a bad one) -> logging -> model -> budgets (operator > probe > device
default) -> Summarizer -> banner. A mistake of the operator's raises `StartupError`, which the
command turns into a logged message and `EXIT_SETTINGS`, never a traceback.
"""

from __future__ import annotations

import argparse
import logging
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from worker.commands.exit_codes import EXIT_SETTINGS
from worker.settings.budgets import Budgets
from worker.settings.fields import SettingsError
from worker.settings.load import LoadedSettings, load_settings

log = logging.getLogger(__name__)


class StartupError(Exception):
    """Start-up stopped on an operator's mistake; the message names it."""

    exit_code = EXIT_SETTINGS


def exit_code_of(command: Callable[[argparse.Namespace], int], args: argparse.Namespace) -> int:
    """`command(args)`'s exit code; a StartupError is logged as its message (an operator's mistake:
    no traceback) and exits with its code."""
    try:
        return command(args)
    except StartupError as exc:
        log.error("%s", exc)
        return exc.exit_code


def read_settings(args: argparse.Namespace, sections: tuple[str, ...] | None = None) -> LoadedSettings:
    """The command's settings (all sections when None), then logging configured from them; a command
    that reads `[kafka]` tags its log lines with the worker's name."""
    from worker.ops.logs import configure_logging

    try:
        loaded = load_settings(args, sections=sections)
    except SettingsError as exc:
        raise StartupError(str(exc)) from None
    tags = {"worker": loaded.settings.kafka.worker_name} if sections is None or "kafka" in sections else {}
    configure_logging(loaded.settings.log, **tags)
    return loaded


@dataclass(frozen=True)
class Started:
    model: Any          # worker.model.LoadedModel
    budgets: Budgets
    summarizer: Any     # worker.summarizer.summarizer.Summarizer, built, not started


def start_summarizer(loaded_settings: LoadedSettings, command: str, **banner_fields: Any) -> Started:
    """The tokenizer the `[engine]` settings name, then the preprocessing pool (its processes import
    and load their tokenizer copies while this process loads the model, finds its budgets and warms
    up), the model, its budgets and the Summarizer, then the banner."""
    from worker.commands.runtime import (banner, budgets_for, build_summarizer, load_model, load_tokenizer,
                                         start_preprocessor)

    engine = loaded_settings.settings.engine
    try:
        tokenizer = load_tokenizer(engine)
    except (FileNotFoundError, ValueError) as exc:  # a wrong --model or --tokenizer
        raise StartupError(f"engine.model (--model, TELESUM_MODEL) {engine.model!r}: {exc}") from None
    preprocessor = start_preprocessor(tokenizer, engine)
    try:
        try:
            model = load_model(engine, tokenizer)
        except SettingsError as exc:  # a setting the device cannot honour (engine.dtype)
            raise StartupError(str(exc)) from None
        except (FileNotFoundError, ValueError) as exc:
            raise StartupError(f"engine.model (--model, TELESUM_MODEL) {engine.model!r}: {exc}") from None
        budgets = budgets_for(loaded_settings, model)
        summarizer = build_summarizer(engine, budgets, model, preprocessor=preprocessor)
    except BaseException:
        preprocessor.close()
        raise
    banner(command, model, budgets, summarizer, **banner_fields)
    return Started(model, budgets, summarizer)
