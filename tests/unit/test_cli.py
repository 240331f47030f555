"""The `evermind` command: help for every subcommand, clear errors."""

from __future__ import annotations

import subprocess
import sys

import pytest

from evermind.cli import build_parser, main
from tests import procs


def _run(*args: str) -> subprocess.CompletedProcess[str]:
    return procs.run(
        [sys.executable, "-m", "evermind.cli", *args], capture_output=True, text=True, check=False
    )


def test_top_level_help_lists_subcommands() -> None:
    out = _run("--help")
    assert out.returncode == 0
    for name in ("studio", "doctor", "bench"):
        assert name in out.stdout


def test_every_subcommand_has_help() -> None:
    parser = build_parser()
    sub = next(a for a in parser._actions if a.dest == "command")
    for name in sub.choices:
        out = _run(name, "--help")
        assert out.returncode == 0, f"{name} --help failed: {out.stderr}"
        assert "usage: evermind " + name in out.stdout


def test_version() -> None:
    out = _run("--version")
    assert out.returncode == 0 and out.stdout.startswith("evermind ")


def test_studio_with_a_folder_that_is_not_a_bundle_fails_in_words(tmp_path, capsys) -> None:
    code = main(["studio", "--no-open", "--dir", str(tmp_path)])
    assert code == 2
    assert "has no index.html" in capsys.readouterr().err


def test_unknown_subcommand_is_a_usage_error() -> None:
    with pytest.raises(SystemExit) as exc:
        build_parser().parse_args(["fly"])
    assert exc.value.code == 2
