"""The ``evermind`` command: the code in the package that parses arguments and prints.

The one exception is the Claude Code hook, :mod:`evermind.mcp.hook`: the installed hooks start
it as ``python -m evermind.mcp.hook`` (the fastest start), so it keeps its own parser (which
``evermind hook`` reuses) and writes its notes to stderr.

Native-only. Nothing in the library imports this package. One module per group of
subcommands, each with ``register(subparsers)``: :mod:`~evermind.cli.studio` (studio,
doctor), :mod:`~evermind.cli.bench` (bench), :mod:`~evermind.cli.train` (train, generate,
embed, export, tune-embedder, distill-embedder, eval), :mod:`~evermind.cli.affect`
(train-affect), :mod:`~evermind.cli.distill` (distill), :mod:`~evermind.cli.adapt` (adapt,
merge-adapter), :mod:`~evermind.cli.ingest` (ingest), :mod:`~evermind.cli.serve` (serve, push)
and :mod:`~evermind.cli.mcp` (mcp, install-mcp, hook); :mod:`~evermind.cli.progress` draws the
progress bars. They import their heavy dependencies inside the command functions, so that
``evermind --help`` stays fast.

Every subcommand exits non-zero with a one-line ``error: ...`` on failure.
"""

from __future__ import annotations

import argparse
import sys
import time
from collections.abc import Sequence
from typing import Any

import evermind
from evermind.cli import adapt, affect, bench, distill, ingest, mcp, serve, studio, train
from evermind.errors import EvermindError

#: The subcommand modules, in the order ``evermind --help`` lists them.
COMMAND_MODULES = [studio, bench, train, affect, distill, adapt, ingest, serve, mcp]


def build_parser() -> argparse.ArgumentParser:
    """The ``evermind`` argument parser with every subcommand."""
    parser = argparse.ArgumentParser(
        prog="evermind",
        description="Evermind: train a small SSM memory in a browser tab and serve it to agents.",
    )
    parser.add_argument("--version", action="version", version=f"evermind {evermind.__version__}")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")
    sub.required = True
    for module in COMMAND_MODULES:
        module.register(sub)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    """Entry point of the ``evermind`` console script."""
    args = build_parser().parse_args(argv)
    start = time.perf_counter()
    try:
        code: Any = args.func(args)
    except EvermindError as err:
        print(f"error: {err}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        print(f"interrupted after {time.perf_counter() - start:.1f} s", file=sys.stderr)
        return 130
    return int(code or 0)
