"""``evermind bench kernels | train | serve | ...`` (native-only).

The benchmarks live in the checkout's top-level ``benchmarks/`` package, outside the wheel,
and the installed package never imports them. This command finds the checkout the package
was installed from (an editable install: ``<checkout>/src/evermind``) and runs
``python -P -m benchmarks WORDS...`` there as a child process, every word after ``bench``
forwarded: the checkout's ``src`` and root go first on the child's ``PYTHONPATH`` (so it
measures this very code), the working directory stays the caller's (relative paths in the
arguments mean what they meant), and ``-P`` keeps a ``benchmarks`` folder in that directory
from shadowing the checkout's. Its exit status is the command's.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import evermind
from evermind.errors import EvermindError


def find_checkout(package_dir: Path | None = None) -> Path:
    """The source checkout holding ``package_dir`` (default: the imported ``evermind``).

    Raises:
        EvermindError: ``package_dir`` is not ``<checkout>/src/evermind`` of a checkout with a
            ``benchmarks/`` package (e.g. a wheel installed into site-packages).
    """
    package = (package_dir or Path(evermind.__file__).parent).resolve()
    root = package.parents[1]
    if not (root / "benchmarks" / "__init__.py").is_file():
        raise EvermindError(
            "evermind bench runs from a source checkout (its benchmarks/ folder is not "
            f"installed; none at {root}); clone the repository and `pip install -e .` there"
        )
    return root


def bench_command(root: Path, argv: list[str]) -> tuple[list[str], dict[str, str]]:
    """The child's argument vector and environment for ``evermind bench ARGV`` from ``root``."""
    env = dict(os.environ)
    paths = [str(root / "src"), str(root), env.get("PYTHONPATH", "")]
    env["PYTHONPATH"] = os.pathsep.join(p for p in paths if p)
    return [sys.executable, "-P", "-m", "benchmarks", *argv], env


def cmd_bench(argv: list[str]) -> int:
    """``evermind bench ...``: the checkout's ``benchmarks`` package in a child process;
    returns its exit status (128 + N when signal N ended it)."""
    command, env = bench_command(find_checkout(), argv)
    code = subprocess.run(command, env=env, check=False).returncode
    return code if code >= 0 else 128 - code


def register(sub: Any) -> None:
    """Adds ``bench`` to the ``evermind`` command; every word after it (``--help`` too) goes on."""
    bench = sub.add_parser(
        "bench",
        add_help=False,
        prefix_chars="\0",
        help="benchmark kernels, the model or the runtime (from a checkout; bench --help)",
    )
    bench.add_argument("argv", nargs="*")
    bench.set_defaults(func=lambda args: cmd_bench(args.argv))
