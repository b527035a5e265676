"""`telesum config`: the effective settings and where each value came from, secrets masked.

Takes every flag `telesum worker` takes (and `--config FILE`), so a combination can be checked
before it is deployed; an unknown or ill-typed setting fails here exactly as at start-up.
"""

from __future__ import annotations

import argparse
import logging
import sys

import msgspec

from worker.commands.exit_codes import EXIT_OK, EXIT_SETTINGS
from worker.settings.fields import SettingsError
from worker.settings.load import add_arguments as add_setting_arguments
from worker.settings.load import load_settings
from worker.settings.show import format_table, settings_rows

log = logging.getLogger(__name__)


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--json", action="store_true", help="one JSON object per setting, a list")
    add_setting_arguments(parser)


def run(args: argparse.Namespace) -> int:
    try:
        loaded = load_settings(args)
    except SettingsError as exc:
        log.error("%s", exc)
        return EXIT_SETTINGS
    rows = settings_rows(loaded)
    if args.json:
        sys.stdout.write(msgspec.json.encode(rows).decode() + "\n")
    else:
        sys.stdout.write(format_table(rows) + "\n")
    return EXIT_OK
