"""The command line answers at once: ``workbench --help``, every ``workbench CMD --help`` and argument errors cost
at most 0.5 CPU-seconds and 120 MB, because no command imports torch, transformers, peft, panel or pandas before it
needs them. Each is run in a child process that reports its own CPU time, peak memory and the heavy modules it
loaded, so a heavy import that sneaks back is named."""

from __future__ import annotations

import importlib.util
from pathlib import Path

import pytest

from workbench.apps.cli import COMMANDS

CPU_SECONDS = 0.5
PEAK_MB = 120
BENCH = Path(__file__).resolve().parents[1] / "bench" / "bench_cli.py"


def _run(argv: list[str]) -> dict:
    """The command in a child process, measured by ``bench/bench_cli.py`` (the benchmark's own probe)."""
    spec = importlib.util.spec_from_file_location("bench_cli", BENCH)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod.run_child(argv)


def _check(argv: list[str], rc: int) -> dict:
    got = _run(argv)
    assert got["rc"] == rc, got
    assert not got["heavy"], f"workbench {' '.join(argv)} imported {got['heavy']} before it needed them"
    assert got["cpu"] <= CPU_SECONDS, f"workbench {' '.join(argv)}: {got['cpu']:.2f} CPU-s"
    assert got["mb"] <= PEAK_MB, f"workbench {' '.join(argv)}: {got['mb']:.0f} MB"
    return got


def test_the_top_level_help_is_light():
    got = _check(["--help"], 0)
    assert all(name in got["out"] for name in COMMANDS)


@pytest.mark.parametrize("command", sorted(COMMANDS))
def test_each_commands_help_is_light(command):
    got = _check([command, "--help"], 0)
    assert f"usage: workbench {command}" in got["out"]


@pytest.mark.parametrize("argv", [
    ["dashboard", "--port", "70000"],
    ["train", "--steps", "0"],
    ["train", "--temperature", "-1"],
    ["train", "--top-p", "5"],
    ["sft", "--batch-size", "0"],
    ["eval", "--method", "direct", "--limit", "0"],
    ["eval", "--method", "direct", "--rollout-engine", "int8"],
    ["eval"],
    ["demo", "--limit", "0"],
    ["train", "--no-such-flag"],
    ["no-such-command"],
    # an empty value never stands for the default (a new run, the default model, the current folder, nothing)
    ["train", "--resume", ""],
    ["eval", "--method", "direct", "--model", ""],
    ["expert", "--method", ""],
    ["dashboard", "--static", ""],
    ["ask", " "],
    ["export", "verl", "--method", "search_r1", "--out", ""],
], ids=lambda a: "-".join(x or "empty" for x in a).replace("--", ""))
def test_argument_errors_are_light(argv):
    got = _check(argv, 2)
    assert "error" in got["out"]
    if "" in argv or " " in argv:
        assert "expected a non-empty value" in got["out"], got["out"][-300:]


def test_the_parser_for_one_command_builds_only_that_commands_flags():
    from workbench.apps.cli import build_parser, command_word

    assert command_word(["-v", "train", "--steps", "2"]) == "train" and command_word(["--help"]) is None
    sub = next(a for a in build_parser(only="eval")._actions if a.dest == "command")
    assert any(a.dest == "limit" for a in sub.choices["eval"]._actions)
    assert not any(a.dest == "steps" for a in sub.choices["train"]._actions)
    full = next(a for a in build_parser()._actions if a.dest == "command")  # the docs' reference: every command
    assert any(a.dest == "steps" for a in full.choices["train"]._actions)
