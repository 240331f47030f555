"""``evermind ask``: cited passages for a question from what ``evermind ingest`` stored.

Reads the same store and namespace ``evermind ingest`` writes (``--store``, ``--tenant``,
``--namespace``, the same defaults), embedding the question as ingest embedded the chunks
(``--model`` / ``--embedder``, the same options; none: lexical recall), and prints the passages
:func:`evermind.ingest.search_ingested` finds, each with its citation, or as JSON with
``--json``. When no chunk clears recall's relevance floor it prints ``no evidence`` and exits
with status 1. With ``--answer-with MODEL`` a model answers from the passages through
``--base-url`` (the local ``evermind serve`` by default, whose gateway reaches Claude, GPT and
any OpenAI-compatible server), citing them as ``[n]`` (:mod:`evermind.retrieval.ingested`); the
model is not asked when there is no evidence.

``--where 'status = "open" and priority_rank <= 2'`` (:func:`evermind.vectorstore.where.
parse_where`) or ``--where-json '{"eq": ["status", "open"]}'`` keeps only chunks whose row
fields the filter admits, inside recall (before the top-k cut). A filter that does not parse
is one line naming the position and what was expected, exit status 2, nothing searched.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import sys
from pathlib import Path
from typing import Any

from evermind.cli.args import package_file
from evermind.cli.ingest import store_path
from evermind.mcp.config import DEFAULT_NAMESPACE, DEFAULT_TENANT
from evermind.search.terms import MIN_COVERAGE

#: The most passages one question asks for.
MAX_TOP_K = 50
#: Where ``--answer-with`` reaches the model by default: the local ``evermind serve``.
DEFAULT_ANSWER_URL = "http://127.0.0.1:8377/v1"
#: The longest answer ``--max-tokens`` may ask for.
MAX_ANSWER_TOKENS = 8192


def _top_k(value: str) -> int:
    try:
        number = int(value)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a whole number, got {value!r}") from None
    if not 1 <= number <= MAX_TOP_K:
        raise argparse.ArgumentTypeError(f"expected 1 to {MAX_TOP_K}, got {number}")
    return number


def _share(value: str) -> float:
    try:
        number = float(value)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a number in (0, 1], got {value!r}") from None
    if not 0.0 < number <= 1.0:
        raise argparse.ArgumentTypeError(f"expected a number in (0, 1], got {value!r}")
    return number


def _max_tokens(value: str) -> int:
    try:
        number = int(value)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a whole number, got {value!r}") from None
    if not 1 <= number <= MAX_ANSWER_TOKENS:
        raise argparse.ArgumentTypeError(f"expected 1 to {MAX_ANSWER_TOKENS}, got {number}")
    return number


def register(sub: Any) -> None:
    """Adds ``ask`` to the ``evermind`` command."""
    cmd = sub.add_parser(
        "ask",
        help="cited passages, or a cited answer, for a question from the ingested files",
        description=(
            "Find the passages answering QUESTION among the chunks `evermind ingest` stored, "
            "each cited by source, line and section; with --answer-with MODEL, a model "
            "answers from them, citing each claim as [n]. Exit status 1 with 'no evidence' "
            "when no passage clears recall's relevance floor (no model is asked then)."
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
    cmd.add_argument(
        "--min-coverage",
        type=_share,
        default=None,
        metavar="SHARE",
        help="also refuse passages holding less than this IDF-weighted share of the "
        f"question's content terms (the retriever's floor is {MIN_COVERAGE}); default: "
        "recall's floor alone",
    )
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
    answer = cmd.add_argument_group(
        "answer",
        "with --answer-with, a model answers from the passages, citing them as [n]; "
        "'I don't have that.' when they do not hold the answer (exit 1)",
    )
    answer.add_argument(
        "--answer-with",
        metavar="MODEL",
        help="the model that answers (e.g. openai/gpt-4o-mini or anthropic/claude-sonnet-4-5 "
        "through evermind serve's gateway); default: passages only",
    )
    answer.add_argument(
        "--base-url",
        default=DEFAULT_ANSWER_URL,
        help="the OpenAI-compatible API the model is reached through (evermind serve)",
    )
    answer.add_argument(
        "--token",
        default=os.environ.get("EVERMIND_TOKEN"),
        help="bearer token for that API (default: $EVERMIND_TOKEN)",
    )
    answer.add_argument(
        "--max-tokens", type=_max_tokens, default=512, help="the answer's length limit"
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
            return await search_ingested(
                store, args.question, args.top_k, where, min_coverage=args.min_coverage
            )

    passages = asyncio.run(run())
    if args.answer_with:
        return _answer(args, passages)
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


def _answer(args: argparse.Namespace, passages: list[Any]) -> int:
    """Prints the model's answer over ``passages`` and the sources it cites (or, with
    ``--json``, one object); exit 1 when it refused, before or after asking the model."""
    from evermind.bridges import answers, protocols
    from evermind.retrieval.ingested import answer_ingested, answer_json

    async def run() -> Any:
        bridge = protocols.lookup("openai", "ask --answer-with").sdk(
            api_key=args.token or "evermind",
            base_url=args.base_url,
            max_retries=1,
            timeout=120.0,
            max_answer_chars=answers.MAX_ANSWER_CHARS,
        )
        try:
            return await answer_ingested(
                args.question,
                passages,
                bridge,
                model=args.answer_with,
                max_tokens=args.max_tokens,
                tenant=args.tenant,
            )
        finally:
            await bridge.aclose()

    answer = asyncio.run(run())
    if args.json:
        print(json.dumps(answer_json(answer, passages)))
    else:
        print(answer.text.strip())
        if answer.citations:
            print("\nSources:")
            for citation in answer.citations:
                print(f"[{citation.number}] {passages[citation.number - 1].citation}")
    if answer.invalid:
        numbers = ", ".join(f"[{n}]" for n in answer.invalid)
        print(f"warning: the answer cites {numbers}, which name no passage", file=sys.stderr)
    elif not answer.refused and not answer.citations:
        print("warning: the answer cites no passage", file=sys.stderr)
    return 1 if answer.refused else 0


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
