"""The ``evermind`` command: the code in the package that parses arguments and prints.

The one exception is the Claude Code hook, :mod:`evermind.mcp.hook`: the installed hooks start
it as ``python -m evermind.mcp.hook`` (the fastest start), so it keeps its own parser (which
``evermind hook`` reuses) and writes its notes to stderr.

Native-only. Nothing in the library imports this package. One module per group of subcommands,
each with ``register(subparsers)``: :mod:`~evermind.cli.studio` (studio, doctor),
:mod:`~evermind.cli.bench` (bench), :mod:`~evermind.cli.train` (train, generate, embed, export,
tune-embedder, distill-embedder, eval; ``eval run`` is :mod:`~evermind.cli.evaluate`),
:mod:`~evermind.cli.embedder` (build-embedder), :mod:`~evermind.cli.affect` (train-affect),
:mod:`~evermind.cli.distill` (distill), :mod:`~evermind.cli.adapt` (adapt, merge-adapter),
:mod:`~evermind.cli.hf` (import-hf), :mod:`~evermind.cli.ingest` (ingest),
:mod:`~evermind.cli.ask` (ask), :mod:`~evermind.cli.agent` (agent run, resume, history, list, fork),
:mod:`~evermind.cli.serve` (serve, push) and :mod:`~evermind.cli.mcp` (mcp, install-mcp, hook);
:mod:`~evermind.cli.progress` draws the progress bars; :mod:`~evermind.cli.args` holds the
file-argument types and the help format (every option's default shown). They import their heavy
dependencies inside the command functions, so that ``evermind --help`` stays fast.

Bad input is one line on stderr and exit code 2, never a traceback: a usage error or a bad file
argument fails in the parser (which names the argument); an :class:`~evermind.errors.EvermindError`,
``OSError`` or ``UnicodeDecodeError`` a command raises is turned into one line here, in
:func:`main`, naming the argument whose file it was where that can be told.
"""

from __future__ import annotations

import argparse
import os
import sys
import time
from collections.abc import Sequence
from typing import Any, NoReturn

import evermind
from evermind.cli import (
    adapt,
    affect,
    agent,
    ask,
    bench,
    distill,
    embedder,
    hf,
    ingest,
    mcp,
    serve,
    studio,
    train,
)
from evermind.cli.args import TEXT_TYPE_NAMES, HelpFormatter
from evermind.errors import EvermindError

#: The subcommand modules, in the order ``evermind --help`` lists them.
COMMAND_MODULES = [
    studio,
    bench,
    train,
    embedder,
    affect,
    distill,
    adapt,
    hf,
    ingest,
    ask,
    agent,
    serve,
    mcp,
]


class Parser(argparse.ArgumentParser):
    """An argument parser whose usage errors are one line (with a pointer to ``--help``)."""

    def error(self, message: str) -> NoReturn:
        self.exit(2, f"{self.prog}: error: {message} (see {self.prog} --help)\n")


def build_parser() -> argparse.ArgumentParser:
    """The ``evermind`` argument parser with every subcommand."""
    parser = Parser(
        prog="evermind",
        description="Evermind: train a small SSM memory in a browser tab and serve it to agents.",
        formatter_class=HelpFormatter,
    )
    parser.add_argument("--version", action="version", version=f"evermind {evermind.__version__}")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")
    sub.required = True
    for module in COMMAND_MODULES:
        module.register(sub)
    for command in sub.choices.values():
        command.formatter_class = HelpFormatter
    return parser


def _subcommand(parser: argparse.ArgumentParser, name: str) -> argparse.ArgumentParser | None:
    for action in parser._actions:  # argparse keeps its actions only there
        if isinstance(action, argparse._SubParsersAction):
            found: argparse.ArgumentParser | None = action.choices.get(name)
            return found
    return None


def _label(action: argparse.Action) -> str:
    return "/".join(action.option_strings) or str(action.metavar or action.dest).upper()


def _files(args: argparse.Namespace, action: argparse.Action) -> list[str]:
    """The values of ``action`` in ``args`` that are paths of existing files."""
    value = getattr(args, action.dest, None)
    values = value if isinstance(value, list) else [value]
    return [item for item in values if isinstance(item, str) and os.path.isfile(item)]


def _argument_of(parser: argparse.ArgumentParser, args: argparse.Namespace, err: Exception) -> str:
    """The argument a command's error is about, as ``--model 'x.evermind'``, or ``""``.

    An ``OSError`` names its file: the argument with that value. A ``UnicodeDecodeError``
    names none: the one text-file argument given, if there is exactly one.
    """
    command = _subcommand(parser, getattr(args, "command", ""))
    if command is None:
        return ""
    if getattr(args, "eval_command", None):  # `evermind eval run`: the nested command's own
        command = _subcommand(command, args.eval_command) or command
    if isinstance(err, OSError) and err.filename is not None:
        wanted = os.path.abspath(os.fsdecode(err.filename))
        for action in command._actions:
            value = getattr(args, action.dest, None)
            for item in value if isinstance(value, list) else [value]:
                if isinstance(item, str) and os.path.abspath(item) == wanted:
                    return _label(action)
    elif isinstance(err, UnicodeDecodeError):
        given = [
            (action, path)
            for action in command._actions
            if getattr(action.type, "__name__", "") in TEXT_TYPE_NAMES
            for path in _files(args, action)
        ]
        if len(given) == 1:
            action, path = given[0]
            return f"{_label(action)} {path!r}"
    return ""


def _one_line(err: Exception, argument: str) -> str:
    """``error: [argument: ]what went wrong`` for an exception a command raised."""
    if isinstance(err, UnicodeDecodeError):
        problem = (
            f"not UTF-8 text (byte 0x{err.object[err.start]:02x} at offset {err.start}); "
            "expected a UTF-8 text file"
        )
    elif isinstance(err, OSError) and err.filename is not None:
        problem = f"{err.strerror or err}: {os.fsdecode(err.filename)!r}"
    else:
        problem = " ".join(str(err).split()) or type(err).__name__
    return f"error: {argument}: {problem}" if argument else f"error: {problem}"


def main(argv: Sequence[str] | None = None) -> int:
    """Entry point of the ``evermind`` console script; returns the exit code (2: bad input)."""
    parser = build_parser()
    try:
        args = parser.parse_args(argv)
    except SystemExit as stop:  # --help, --version, or a usage error (already printed)
        return 0 if stop.code is None else stop.code if isinstance(stop.code, int) else 2
    start = time.perf_counter()
    try:
        code: Any = args.func(args)
    except (EvermindError, OSError, UnicodeDecodeError) as err:
        print(_one_line(err, _argument_of(parser, args, err)), file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        print(f"interrupted after {time.perf_counter() - start:.1f} s", file=sys.stderr)
        return 130
    return int(code or 0)
