"""Every command exits 2 (EXIT_SETTINGS) for an operator's mistake made before any work: a bad flag
value, a bad setting, a missing input, a device it cannot use."""

from __future__ import annotations

import pytest

from worker.cli import COMMANDS, main
from worker.commands.exit_codes import EXIT_SETTINGS


@pytest.mark.parametrize("argv", [
    ["tail", "--count", "-1"],
    ["tail", "--timeout", "-1"],
    ["produce", "--count", "-1"],
    ["probe", "--device", "cpu"],
    ["summarize", "/nonexistent/records.jsonl", "-o", "/nonexistent/out.jsonl"],
    ["config", "--max-new-tokens", "0"],
    ["worker", "--max-new-tokens", "0"],
], ids=lambda argv: " ".join(argv[:3]))
def test_exit_codes_a_bad_flag_or_input_exits_2(argv):
    assert main(argv) == EXIT_SETTINGS


@pytest.mark.parametrize("command", sorted(COMMANDS))
def test_exit_codes_an_unknown_flag_exits_2_in_every_command(command, capsys):
    with pytest.raises(SystemExit) as exc:
        main([command, "--no-such-flag"])
    assert exc.value.code == EXIT_SETTINGS
