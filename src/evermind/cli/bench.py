"""``evermind bench kernels | train | serve`` (native-only).

The benchmarks live in the checkout's top-level ``benchmarks/`` package, outside the wheel;
this command finds the checkout, and forwards every word after ``bench`` to
:func:`benchmarks.main`.
"""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

import evermind
from evermind.errors import EvermindError


def cmd_bench(argv: list[str]) -> int:
    """``evermind bench ...``: runs the checkout's ``benchmarks`` package (not in the wheel)."""
    root = Path(evermind.__file__).resolve().parents[2]  # the checkout, in an editable install
    if not (root / "benchmarks" / "__init__.py").is_file():
        raise EvermindError(
            "evermind bench runs from a source checkout (its benchmarks/ folder is not "
            f"installed; none at {root}); clone the repository and `pip install -e .` there"
        )
    if str(root) not in sys.path:
        sys.path.insert(0, str(root))
    import benchmarks

    return benchmarks.main(argv)


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
