"""``evermind ask``: cited passages for a question from what ``evermind ingest`` stored.

Reads the same store and namespace ``evermind ingest`` writes (``--store``, ``--tenant``,
``--namespace``, the same defaults), embedding the question as ingest embedded the chunks
(``--model`` / ``--embedder``, the same options; none: lexical recall), and prints the passages
:func:`evermind.ingest.search_ingested` finds, each with its citation, or as JSON with
``--json``. When no chunk clears recall's relevance floor it prints ``no evidence`` and exits
with status 1. Passages only: no model writes an answer here.

``--where 'status = "open" and priority_rank <= 2'`` (:func:`evermind.vectorstore.where.
parse_where`) or ``--where-json '{"eq": ["status", "open"]}'`` keeps only chunks whose row
fields the filter admits, inside recall (before the top-k cut). A filter that does not parse
is one line naming the position and what was expected, exit status 2, nothing searched.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import sys
from pathlib import Path
from typing import Any

from evermind.cli.args import package_file
from evermind.cli.ingest import store_path
from evermind.mcp.config import DEFAULT_NAMESPACE, DEFAULT_TENANT

#: The most passages one question asks for.
MAX_TOP_K = 50


def _top_k(value: str) -> int:
    try:
        number = int(value)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a whole number, got {value!r}") from None
    if not 1 <= number <= MAX_TOP_K:
        raise argparse.ArgumentTypeError(f"expected 1 to {MAX_TOP_K}, got {number}")
    return number


def register(sub: Any) -> None:
    """Adds ``ask`` to the ``evermind`` command."""
    cmd = sub.add_parser(
        "ask",
        help="cited passages for a question from the ingested files (or 'no evidence')",
        description=(
            "Find the passages answering QUESTION among the chunks `evermind ingest` stored, "
            "each cited by source, line and section. Passages only: no model writes an "
            "answer. Exit status 1 with 'no evidence' when no passage clears recall's "
            "relevance floor."
        ),
    )
    cmd.add_argument("question", metavar="QUESTION", help="the question, in plain words")
    cmd.add_argument(
        "--store",
        help="a SQLite file or sqlite:///PATH, as for evermind ingest (default: the MCP "
        "memory file, $EVERMIND_MEMORY_FILE or the data directory's)",
    )
    cmd.add_argument("--tenant", default=DEFAULT_TENANT, help="tenant of the namespace")
    cmd.add_argument("--namespace", default=DEFAULT_NAMESPACE, help="namespace")
    cmd.add_argument(
        "--model",
        type=package_file,
        help="the .evermind package the chunks were embedded with (default: $EVERMIND_MODEL); "
        "without one recall is lexical",
    )
    cmd.add_argument(
        "--embedder",
        choices=["none", "terms"],
        default="none",
        help="without --model: none (lexical recall) or terms, as the chunks were ingested",
    )
    cmd.add_argument("--top-k", type=_top_k, default=5, help=f"most passages (at most {MAX_TOP_K})")
    cmd.add_argument("--json", action="store_true", help="print the passages as one JSON object")
    where = cmd.add_mutually_exclusive_group()
    where.add_argument(
        "--where",
        metavar="EXPR",
        help='only rows whose fields match, e.g. \'status = "open" and (priority = "P1" or '
        "age >= 30)'; operators = != < <= > >= in (...) not in (...), exists FIELD, not, "
        "and, or, parentheses; values: numbers, quoted strings, true, false",
    )
    where.add_argument(
        "--where-json",
        metavar="JSON",
        help='the same filter in its JSON form, e.g. \'{"eq": ["status", "open"]}\'',
    )
    cmd.set_defaults(func=cmd_ask)


def cmd_ask(args: argparse.Namespace) -> int:
    from evermind.cli.ingest import embedder_for
    from evermind.errors import ConfigError
    from evermind.ingest import NO_EVIDENCE, search_ingested
    from evermind.mcp.config import store_namespace
    from evermind.memory import MemoryStore

    where = _where(args)  # a bad filter stops here: nothing is opened or searched
    path = store_path(args.store)
    if isinstance(path, Path) and not path.is_file():
        raise ConfigError(f"ask: no memory store at {path}; hint: run evermind ingest first")
    namespace = store_namespace(args.tenant, args.namespace)
    embedder, _ = embedder_for(args)

    def opened() -> Any:
        if isinstance(path, str):  # a shared store: the tenant's namespace, as ingest writes it
            from evermind.memory.shared_memory import shared_memory

            return shared_memory(path, embedder, tenant=args.tenant, namespace=args.namespace)
        return MemoryStore(path, embedder, namespace=namespace)

    async def run() -> list[Any]:
        async with opened() as store:
            return await search_ingested(store, args.question, args.top_k, where)

    passages = asyncio.run(run())
    if args.json:
        print(
            json.dumps(
                {
                    "question": args.question,
                    "refused": not passages,
                    "passages": [p.to_dict() for p in passages],
                }
            )
        )
    elif passages:
        for passage in passages:
            print(f"[{passage.number}] {passage.citation}  (score {passage.score:.3f})")
            for line in passage.text.splitlines():
                print(f"    {line}")
    if not passages:
        print(NO_EVIDENCE, file=sys.stderr if args.json else sys.stdout)
        return 1
    return 0


def _where(args: argparse.Namespace) -> Any:
    """The filter ``--where`` or ``--where-json`` gives, or None.

    Raises:
        InputError: It does not parse (the message names the position, or the bad part).
    """
    from evermind.errors import InputError
    from evermind.vectorstore.where import parse_where, parse_where_json

    if args.where is not None:
        return parse_where(args.where)
    if args.where_json is not None:
        try:
            spec = json.loads(args.where_json)
        except json.JSONDecodeError as err:
            raise InputError(
                f"--where-json: not JSON ({err.msg} at position {err.pos + 1})", code="bad_filter"
            ) from err
        return parse_where_json(spec)
    return None
