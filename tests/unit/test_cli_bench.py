"""``evermind bench``: the checkout's benchmarks in a child process, never on the package's path.

The command finds the checkout the package lives in and runs ``python -P -m benchmarks`` with
the caller's working directory; these tests run it from a folder outside the checkout that
holds a decoy ``benchmarks`` package, and check that a package outside a checkout is refused
in words.
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

import evermind
from evermind.cli.bench import bench_command, find_checkout
from evermind.errors import EvermindError
from tests import procs

ROOT = Path(__file__).resolve().parents[2]


def _evermind(cwd: Path, *args: str) -> subprocess.CompletedProcess[str]:
    _, env = bench_command(ROOT, [])  # this checkout's src first, whatever the cwd
    return procs.run(
        [sys.executable, "-m", "evermind.cli", *args],
        cwd=cwd,
        env=env,
        capture_output=True,
        text=True,
        check=False,
        timeout=300,
    )


@pytest.fixture
def decoy(tmp_path: Path) -> Path:
    """A working directory whose own ``benchmarks`` package would fail if it were imported."""
    (tmp_path / "benchmarks").mkdir()
    (tmp_path / "benchmarks" / "__init__.py").write_text(
        "raise SystemExit('the decoy benchmarks package was imported')\n", encoding="utf-8"
    )
    return tmp_path


def test_the_checkout_is_the_one_the_package_lives_in() -> None:
    assert Path(evermind.__file__).resolve().parents[2] == ROOT
    assert find_checkout() == ROOT


def test_a_package_outside_a_checkout_is_refused_in_words(tmp_path: Path) -> None:
    site = tmp_path / "site-packages" / "evermind"
    site.mkdir(parents=True)
    where = re.escape(str(tmp_path))
    with pytest.raises(EvermindError, match=rf"source checkout .*none at {where}\)"):
        find_checkout(site)


def test_the_child_runs_the_checkouts_code_first() -> None:
    command, env = bench_command(ROOT, ["kernels", "--quick"])
    assert command == [sys.executable, "-P", "-m", "benchmarks", "kernels", "--quick"]
    paths = env["PYTHONPATH"].split(os.pathsep)
    assert paths[:2] == [str(ROOT / "src"), str(ROOT)]


def test_help_comes_from_the_checkout_whatever_the_working_directory(decoy: Path) -> None:
    out = _evermind(decoy, "bench", "--help")
    assert out.returncode == 0, out.stderr
    assert "usage: evermind bench" in out.stdout
    assert "decoy" not in out.stderr


def test_a_benchmark_error_is_one_line_and_status_2(decoy: Path) -> None:
    out = _evermind(decoy, "bench", "kernels", "--native-only", "--browser-only")
    assert out.returncode == 2
    assert out.stderr.strip() == (
        "error: bench: --native-only and --browser-only exclude each other"
    )
