"""Runs the conversational-memory set through ``MemoryStore.recall``: recall@5/@10 per kind.

Each dialogue is one user's memory: a ``MemoryStore`` on a temporary SQLite file holds
every turn as a memory (key = turn id, content = ``"speaker: text"``, meta = session, date
and speaker), written with :meth:`MemoryStore.remember` while the store's clock reads the
turn's session date (noon UTC, one second per turn), so recency weighting sees the
conversation's own timeline. The questions are then asked the day after the last session,
each through ``recall(question, top_k=10)``, what an agent asking for ten memories gets.

Metrics, per question kind and overall (README.md defines the kinds):

- recall@k (k = 5, 10) = |gold ∩ top k| / min(k, |gold|): a question whose answer needs two
  turns scores 0.5 at k when one of them is in the top k;
- MRR@10 = 1 / rank of the first gold turn in the top 10 (0 when none is);
- ranks break ties against the gold turns (:func:`evals.memory.gold_rank`);
- stale@1 (knowledge-update questions only) = share whose top hit is one of the question's
  distractor turns, the old value of a fact that changed since;
- empty = share of questions for which recall returns nothing (its relevance floor says no
  memory matches). For abstention questions (never answered in the dialogue) that is the
  wanted outcome, reported as ``abstain``; for every other kind it is a miss.

Runs lexical-only (no embedder) always and, for every ``--embedder`` given, the embedder alone
(``RecallOptions(lexical=False)``) and hybrid; embedders as in :mod:`evals.memory`
(:func:`evals.embedders.resolve`: ``minilm``, ``package:PATH``, ``module:function``). These
are development numbers; report them on the ``report`` split, as aggregates only (this
script never prints a question). The ms/query it prints is recall's own work: every turn
and question is embedded in one batch first (the embedder is memoised).

Usage:
    .venv/bin/python -m evals.conversation_memory --set report
    .venv/bin/python -m evals.conversation_memory --set report --embedder minilm --json out.json
"""

from __future__ import annotations

import argparse
import asyncio
import json
import sys
import tempfile
import time
from collections import defaultdict
from collections.abc import Sequence
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[2]
if str(ROOT) not in sys.path:  # run by its file path rather than as ``-m``
    sys.path.insert(0, str(ROOT))
try:
    import evermind  # noqa: F401
except ImportError:  # running from a checkout without an installed package
    sys.path.insert(0, str(ROOT / "src"))

from evals.conversation_memory import (  # noqa: E402
    HERE,
    KINDS,
    SPLITS,
    ConversationSetError,
    Dialogue,
    Question,
    load,
)
from evals.embedders import resolve  # noqa: E402
from evals.memory import gold_rank  # noqa: E402
from evermind.memory import Hit, MemoryStore, RecallOptions  # noqa: E402

#: How many memories each question asks recall for (recall@10 needs ten).
TOP_K = 10
#: The cut-offs reported.
CUTOFFS = (5, 10)


def turn_time(date: str, index: int) -> float:
    """Seconds since the epoch at which turn ``index`` of a session dated ``date`` is
    written: noon UTC that day, plus one second per turn (keeps the order)."""
    day = datetime.strptime(date, "%Y-%m-%d").replace(tzinfo=UTC)
    return (day + timedelta(hours=12, seconds=index)).timestamp()


def question_metrics(hits: Sequence[Hit], question: Question) -> dict[str, float]:
    """The metrics of one question from recall's hits (best first).

    Args:
        hits: What recall returned (at most :data:`TOP_K`).
        question: The question, with its gold and distractor turns.

    Returns:
        ``empty`` always; for a question with gold turns ``r@5``, ``r@10`` and ``mrr``;
        for a knowledge-update question ``stale@1``. See the module docstring.
    """
    out = {"empty": float(not hits)}
    gold = set(question.gold_turns)
    if gold:
        # A gold turn recall did not return ranks at TOP_K: beyond every cut-off.
        ranks = [min(r, TOP_K) for r in gold_rank(hits, gold, TOP_K + 1)]
        for k in CUTOFFS:
            out[f"r@{k}"] = sum(r < k for r in ranks) / min(k, len(gold))
        out["mrr"] = 1.0 / (1 + ranks[0]) if ranks[0] < TOP_K else 0.0
    if question.kind == "knowledge-update" and question.distractor_turns:
        out["stale@1"] = float(bool(hits) and hits[0].key in question.distractor_turns)
    return out


async def ask_dialogue(
    dialogue: Dialogue, embedder: Any, options: RecallOptions
) -> tuple[list[tuple[Question, dict[str, float]]], float]:
    """Stores one dialogue's turns, asks its questions; returns (metrics, seconds/query)."""
    now = [0.0]
    with tempfile.TemporaryDirectory() as tmp:
        store = MemoryStore(
            Path(tmp) / "conversation.db", embedder, options=options, clock=lambda: now[0]
        )
        try:
            if embedder is not None:  # one batch; the memoised embedder then serves each call,
                # so the timing below is recall's own work, not the model's
                embedder(
                    [t.content for t in dialogue.turns] + [q.question for q in dialogue.questions]
                )
            for index, turn in enumerate(dialogue.turns):
                now[0] = turn_time(turn.date, index)
                meta = {"session": turn.session, "date": turn.date, "speaker": turn.speaker}
                await store.remember(turn.id, turn.content, meta=meta)
            now[0] = turn_time(dialogue.turns[-1].date, 0) + 86400.0  # the day after
            await store.recall("warm-up", top_k=1)  # indexes every turn before timing
            results = []
            started = time.perf_counter()
            for question in dialogue.questions:
                hits = await store.recall(question.question, top_k=TOP_K)
                results.append((question, question_metrics(hits, question)))
            per_query = (time.perf_counter() - started) / max(len(dialogue.questions), 1)
        finally:
            await store.close()
    return results, per_query


def aggregate(results: Sequence[tuple[Question, dict[str, float]]]) -> dict[str, dict[str, float]]:
    """Means of each metric per kind and over ``all`` (abstention's ``empty`` is ``abstain``;
    ``all`` holds the answerable questions' recall and every question's count)."""
    buckets: dict[str, dict[str, list[float]]] = defaultdict(lambda: defaultdict(list))
    for question, metrics in results:
        for bucket in ("all", question.kind):
            for name, value in metrics.items():
                if question.kind == "abstention" and name == "empty":
                    name = "abstain"
                buckets[bucket][name].append(value)
            buckets[bucket]["n"].append(1.0)
    return {
        kind: {
            name: (float(len(values)) if name == "n" else sum(values) / len(values))
            for name, values in b.items()
        }
        for kind, b in buckets.items()
    }


async def evaluate(
    dialogues: Sequence[Dialogue], embedder: Any, options: RecallOptions
) -> tuple[dict[str, dict[str, float]], float]:
    """Every dialogue's questions; returns (metrics per kind, mean seconds per query)."""
    results: list[tuple[Question, dict[str, float]]] = []
    seconds = 0.0
    for dialogue in dialogues:
        found, per_query = await ask_dialogue(dialogue, embedder, options)
        results += found
        seconds += per_query * len(dialogue.questions)
    return aggregate(results), seconds / max(len(results), 1)


def _cell(row: dict[str, float], name: str) -> str:
    return f"{row[name]:.3f}" if name in row else "-"


def print_table(name: str, table: dict[str, dict[str, float]]) -> None:
    """Prints one ranker's rows: all, then each kind present."""
    for kind in ("all", *KINDS):
        if kind not in table:
            continue
        row = table[kind]
        print(
            f"| {name} | {kind} | {int(row['n'])} | {_cell(row, 'r@5')} | {_cell(row, 'r@10')} "
            f"| {_cell(row, 'mrr')} | {_cell(row, 'stale@1')} | {_cell(row, 'empty')} "
            f"| {_cell(row, 'abstain')} |"
        )


def main(argv: list[str] | None = None) -> int:
    """Command-line entry point."""
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--set", choices=SPLITS, default="tune", help="which split (tune)")
    parser.add_argument(
        "--dialogue", action="append", default=[], help="only this dialogue id; repeatable"
    )
    parser.add_argument(
        "--embedder",
        action="append",
        default=[],
        help="minilm, package:PATH or module:function (texts -> vectors); adds the embedder "
        "alone and hybrid; repeatable",
    )
    parser.add_argument("--no-mmr", action="store_true", help="switch the MMR step off")
    parser.add_argument("--folder", type=Path, default=HERE, help="the set's folder")
    parser.add_argument("--json", type=Path, help="also write the results here")
    args = parser.parse_args(argv)
    try:
        dialogues = load(args.set, args.folder)
    except ConversationSetError as err:
        print(f"error: {err}", file=sys.stderr)
        return 2
    if args.dialogue:
        unknown = sorted(set(args.dialogue) - {d.id for d in dialogues})
        if unknown:
            print(f"error: no dialogue {', '.join(unknown)} in split {args.set}", file=sys.stderr)
            return 2
        dialogues = [d for d in dialogues if d.id in args.dialogue]
    hybrid = RecallOptions(mmr=not args.no_mmr)
    alone = RecallOptions(mmr=not args.no_mmr, lexical=False)
    runs: list[tuple[str, Any, RecallOptions]] = [("lexical", None, hybrid)]
    for spec in args.embedder:
        name, embedder = resolve(spec)
        runs.append((f"{name} alone", embedder, alone))
        runs.append((f"{name} hybrid", embedder, hybrid))
    turns = sum(len(d.turns) for d in dialogues)
    questions = sum(len(d.questions) for d in dialogues)
    print(
        f"## Conversational memory via MemoryStore, split {args.set}: {len(dialogues)} "
        f"dialogues, {turns} turns, {questions} questions (development numbers)\n"
    )
    print("| ranker | kind | n | recall@5 | recall@10 | MRR@10 | stale@1 | empty | abstain |")
    print("|---|---|---|---|---|---|---|---|---|")
    report: dict[str, Any] = {}
    timings = []
    for name, embedder, options in runs:
        table, per_query = asyncio.run(evaluate(dialogues, embedder, options))
        print_table(name, table)
        report[name] = table
        timings.append(f"{name}: {per_query * 1000:.2f} ms/query")
    print("\n" + "; ".join(timings) + f"; options: mmr={'off' if args.no_mmr else 'on'}")
    if args.json:
        args.json.write_text(json.dumps(report, indent=2) + "\n", encoding="utf-8")
    return 0
