"""`telesum schemas`: export the JSON Schemas of the message types to `schemas/` (or check them)."""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

import msgspec

from worker.commands.exit_codes import EXIT_FAILED, EXIT_OK
from worker.messages import DeadLetter, IncidentEvent, Summary, TelemetryRecord

# file name -> message type; worker/messages.py is the one source of truth
SCHEMA_TYPES: dict[str, type] = {
    "telemetry_record.json": TelemetryRecord,
    "summary.json": Summary,
    "dead_letter.json": DeadLetter,
    "incident_event.json": IncidentEvent,
}
DEFAULT_DIR = Path(__file__).resolve().parents[2] / "schemas"


def render(kind: type) -> str:
    """The JSON Schema of one message type, as stable, pretty-printed text."""
    schema = msgspec.json.schema(kind)
    schema = {"$schema": "https://json-schema.org/draft/2020-12/schema", "title": kind.__name__, **schema}
    return json.dumps(schema, indent=2, sort_keys=True) + "\n"


def drift(folder: Path) -> list[str]:
    """Names of schema files in `folder` that are missing or differ from the message types."""
    return [name for name, kind in SCHEMA_TYPES.items()
            if not (folder / name).is_file() or (folder / name).read_text() != render(kind)]


def write(folder: Path) -> list[Path]:
    folder.mkdir(parents=True, exist_ok=True)
    paths = []
    for name, kind in SCHEMA_TYPES.items():
        (folder / name).write_text(render(kind))
        paths.append(folder / name)
    return paths


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--out", type=Path, default=DEFAULT_DIR, help=f"folder (default {DEFAULT_DIR})")
    parser.add_argument("--check", action="store_true", help="exit 1 if the files differ from the types")


def run(args: argparse.Namespace) -> int:
    if args.check:
        stale = drift(args.out)
        if stale:
            print(f"schemas out of date in {args.out}: {', '.join(stale)}; run `telesum schemas`", file=sys.stderr)
            return EXIT_FAILED
        print(f"schemas in {args.out} match the message types")
        return EXIT_OK
    for path in write(args.out):
        print(path)
    return EXIT_OK
