"""The `telesum` command line: each subcommand lives in its own module.

A subcommand module defines `add_arguments(parser)` and `run(args) -> int`; it is imported only
when its subcommand runs, so `telesum --help` stays fast and needs no torch.
"""

from __future__ import annotations

import argparse
import importlib
import logging
import sys

# subcommand -> (module, one-line help)
COMMANDS: dict[str, tuple[str, str]] = {
    "summarize": ("worker.commands.summarize", "summarise a JSON Lines file offline (resumable)"),
    "worker": ("worker.commands.worker", "run the Kafka worker"),
    "config": ("worker.commands.config", "print the effective settings and where each came from"),
    "produce": ("worker.commands.produce", "write sample telemetry to a topic or a file"),
    "schemas": ("worker.commands.schemas", "export the JSON Schemas of the message types"),
    "tail": ("worker.commands.tail", "print summaries and dead letters from the output topics"),
    "probe": ("worker.commands.probe", "measure the GPU's bin, KV arena and sequence budgets for a model"),
    "incidents": ("worker.commands.incidents", "incidents tools: learn the cause->effect graph of alarm types "
                                               "from an alarm history (incidents learn)"),
}
BENCHMARKS: dict[str, tuple[str, str]] = {
    "pack": ("worker.benchmarks.pack", "native dispatcher vs a pure-Python FFD"),
    "quality": ("worker.benchmarks.quality", "summary fact recall and echo rate"),
    "consume": ("worker.benchmarks.consume", "one process consuming 0.5 MB records: pure-Python vs crc32c CRC, "
                                             "every codec"),
    "e2e": ("worker.benchmarks.e2e", "end-to-end records/s through a real broker and where the time goes"),
    "faults": ("worker.benchmarks.faults", "every input answered, duplicates and latency through SIGKILLs, "
                                           "a rebalance and a broker restart"),
    "incidents": ("worker.benchmarks.incidents", "alarms grouped into incidents vs two baselines on a real alarm "
                                                 "data set (--offline: in-process)"),
}


def _add_module_command(subparsers, name: str, module: str, help_text: str) -> None:
    parser = subparsers.add_parser(name, help=help_text, description=help_text)
    mod = importlib.import_module(module)
    mod.add_arguments(parser)
    parser.set_defaults(_run=mod.run)


def build_parser(argv: list[str]) -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="telesum", description=__doc__.splitlines()[0])
    parser.add_argument("-v", "--verbose", action="store_true", help="debug logging (as --log-level debug)")
    subparsers = parser.add_subparsers(dest="command", required=True)
    # Only the chosen subcommand's module is imported; the others get a bare parser for --help.
    chosen = next((a for a in argv if not a.startswith("-")), None)
    for name, (module, help_text) in COMMANDS.items():
        if name == chosen:
            _add_module_command(subparsers, name, module, help_text)
        else:
            subparsers.add_parser(name, help=help_text)
    bench = subparsers.add_parser("bench", help="benchmarks")
    bench_sub = bench.add_subparsers(dest="benchmark", required=True)
    chosen_bench = argv[argv.index("bench") + 1] if chosen == "bench" and argv.index("bench") + 1 < len(argv) else None
    for name, (module, help_text) in BENCHMARKS.items():
        if name == chosen_bench:
            _add_module_command(bench_sub, name, module, help_text)
        else:
            bench_sub.add_parser(name, help=help_text)
    return parser


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    args = build_parser(argv).parse_args(argv)
    logging.basicConfig(
        level=logging.DEBUG if args.verbose else logging.INFO,
        format="%(asctime)s %(levelname)s %(name)s: %(message)s",
    )
    if not args.verbose:  # kafka-python logs every connection at INFO
        logging.getLogger("kafka").setLevel(logging.WARNING)
    if args.verbose and getattr(args, "log.level", "") is None:  # a command with settings: -v is a flag
        setattr(args, "log.level", "debug")
    return int(args._run(args) or 0)


if __name__ == "__main__":
    sys.exit(main())
