"""Recall@k of the memory development set, measured through the MCP tool over stdio.

Starts a real ``evermind mcp`` subprocess on a fresh memory file, stores every fact of
``memory_recall_dev.jsonl`` with ``memory_remember`` (key, content, tags), then asks every
question with ``memory_recall`` and scores the keys of the hits it returns, as
``eval_dev.py`` defines the metrics: recall@k = |gold ∩ top k| / min(k, |gold|), MRR over the
returned hits. Runs lexical-only, and again with ``--model FILE.evermind`` when one is given,
and with ``--embedder base|PATH`` (the shipped static embedder, or an embedder file) when one is.
The set is found in ``$EVERMIND_EVAL_DIR``, else ``shared/eval`` next to the checkout (or
pass ``--set``).

Usage::

    python -m evals.mcp_recall                        # lexical only
    python -m evals.mcp_recall --model my.evermind    # lexical only, then with the model
    python -m evals.mcp_recall --embedder base        # lexical only, then the base embedder
    python -m evals.mcp_recall --tune-from base.evermind  # ... with base tuned on the facts
    python -m evals.mcp_recall --tune-from base.evermind --tune-steps 100 --seed 1
    python -m evals.mcp_recall --json results.json

``--tune-steps`` and ``--seed`` are passed to ``evermind tune-embedder`` as ``--steps`` and
``--seed`` (default: the command's own defaults, 300 steps and seed 0). The JSON holds each
phase's wall time under ``"seconds"`` (storing and asking per run, and the tuning), and each
run's ``"answers"``: the hit keys of every question, best first. :func:`report` grades those
answers through :mod:`evermind.evaluation` (a case per question, ``RecallAtK(1|5,
capped=True)``), which is how ``tests/runtime/test_mcp_recall_quality.py`` gates them.

These are development numbers (the set is for tuning); report them as such.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import subprocess
import sys
import tempfile
import time
from collections import defaultdict
from pathlib import Path
from typing import Any

import anyio
from mcp import Client, StdioServerParameters

ROOT = Path(__file__).resolve().parent.parent
if str(ROOT) not in sys.path:  # run by its file path rather than as ``-m evals.mcp_recall``
    sys.path.insert(0, str(ROOT))

from evals import require  # noqa: E402
from evermind.evaluation import Case, Outcome, RecallAtK, Report, run_eval  # noqa: E402

#: The development set's file name (in the folder :func:`evals.find` looks in).
SET_NAME = "memory_recall_dev.jsonl"
HIT_LINE = re.compile(r"^\[(\d+)\] (\S+) \(score ([0-9.]+); tags: (.*)\)$", re.M)
TOP_K = 5
#: The graders of a run's answers: recall@k as ``eval_dev.py`` defines it (over min(k, |gold|)).
GRADERS = (RecallAtK(1, capped=True), RecallAtK(TOP_K, capped=True))


def load_set(path: Path) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
    """The facts and the questions of the development set."""
    rows = [json.loads(line) for line in path.read_text(encoding="utf-8").splitlines() if line]
    facts = [row for row in rows if row["type"] == "fact"]
    questions = [row for row in rows if row["type"] == "question"]
    return facts, questions


def cases(questions: list[dict[str, Any]]) -> list[Case]:
    """One harness case per question: its gold keys are the relevant ids, its kind the tag."""
    return [
        Case(q["id"], q["question"], {"relevant": list(q["gold_keys"])}, (q["kind"],))
        for q in questions
    ]


async def report(name: str, path: Path, answers: dict[str, list[str]]) -> Report:
    """The harness's report of one run: every question of the set at ``path`` a case, its
    outcome the hit keys the server returned (``answers``, by question id), :data:`GRADERS`.
    A question with no recorded answer fails (the run did not ask it)."""

    async def asked(case: Case) -> Outcome:
        if case.id not in answers:
            raise KeyError(f"question {case.id} was not asked")
        return Outcome({"retrieved": answers[case.id]})

    return await run_eval(name, cases(load_set(path)[1]), asked, GRADERS)


def hit_keys(text: str) -> list[str]:
    """The keys of the hits in a ``memory_recall`` answer, best first."""
    return [match.group(2) for match in HIT_LINE.finditer(text)]


async def run(
    path: Path, model: Path | None, memory_file: Path, embedder: str | None = None
) -> dict[str, Any]:
    """Stores the facts and asks the questions through one stdio server (``--model`` or
    ``--embedder`` when given); returns metrics."""
    facts, questions = load_set(path)
    args = ["-m", "evermind.cli", "mcp", "--memory-file", str(memory_file)]
    args += ["--max-results", str(TOP_K)]
    if model is not None:
        args += ["--model", str(model)]
    if embedder is not None:
        args += ["--embedder", embedder]
    params = StdioServerParameters(command=sys.executable, args=args, env=dict(os.environ))
    async with Client(params, read_timeout_seconds=600) as client:
        start = time.perf_counter()
        for fact in facts:
            stored = await client.call_tool(
                "memory_remember",
                {"key": fact["key"], "content": fact["content"], "tags": fact.get("tags", [])},
            )
            if stored.is_error:
                raise RuntimeError(f"remember {fact['key']} failed: {stored.content}")
        write_s = time.perf_counter() - start
        ranked: list[tuple[dict[str, Any], list[str]]] = []
        start = time.perf_counter()
        for question in questions:
            result = await client.call_tool(
                "memory_recall", {"query": question["question"], "top_k": TOP_K}
            )
            text = "".join(block.text for block in result.content if block.type == "text")
            ranked.append((question, hit_keys(text)))
        recall_s = time.perf_counter() - start
        ranked_by = text.splitlines()[-1]
    return score(ranked) | {
        "ranked_by": ranked_by,
        "seconds": {"remember": write_s, "recall": recall_s},
        "answers": {question["id"]: keys for question, keys in ranked},
        "remember_ms": 1000 * write_s / len(facts),
        "recall_ms": 1000 * recall_s / len(questions),
    }


def score(ranked: list[tuple[dict[str, Any], list[str]]]) -> dict[str, Any]:
    """recall@1, recall@5 and MRR overall and per question kind."""
    groups: dict[str, list[tuple[float, float, float]]] = defaultdict(list)
    for question, keys in ranked:
        gold = set(question["gold_keys"])
        r1 = len(gold & set(keys[:1])) / min(1, len(gold))
        r5 = len(gold & set(keys[:5])) / min(5, len(gold))
        rank = next((n for n, key in enumerate(keys, 1) if key in gold), None)
        mrr = 0.0 if rank is None else 1.0 / rank
        for group in ("all", question["kind"]):
            groups[group].append((r1, r5, mrr))
    return {
        group: {
            "n": len(rows),
            "recall@1": sum(r[0] for r in rows) / len(rows),
            "recall@5": sum(r[1] for r in rows) / len(rows),
            "mrr": sum(r[2] for r in rows) / len(rows),
        }
        for group, rows in sorted(groups.items())
    }


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument(
        "--set",
        type=Path,
        help=f"the set (default: {SET_NAME} in $EVERMIND_EVAL_DIR, else shared/eval next to "
        "the checkout)",
    )
    parser.add_argument("--model", type=Path, help="a .evermind package (semantic recall)")
    parser.add_argument(
        "--embedder",
        metavar="base|PATH",
        help="also run `evermind mcp --embedder` with this: 'base' (the shipped static "
        "embedder) or an embedder file",
    )
    parser.add_argument(
        "--tune-from",
        type=Path,
        help="a .evermind package: tune its embedder on the remembered facts "
        "(evermind tune-embedder on the lexical run's memory file), then recall with it",
    )
    parser.add_argument("--tuned-out", type=Path, help="keep the tuned package here")
    parser.add_argument(
        "--tune-steps",
        type=int,
        help="tune-embedder --steps (default: the command's default, 300)",
    )
    parser.add_argument("--seed", type=int, help="tune-embedder --seed (default: its default, 0)")
    parser.add_argument("--json", type=Path, help="write the results here")
    args = parser.parse_args()
    if args.set is None:
        args.set = require(SET_NAME)
    with tempfile.TemporaryDirectory() as folder:
        lexical_file = Path(folder) / "lexical.db"
        runs: dict[str, Any] = {"lexical": anyio.run(run, args.set, None, lexical_file)}
        model = args.model
        if args.tune_from is not None:
            # The user's workflow: tune the embedder on what the agent has remembered.
            model = args.tuned_out or Path(folder) / "tuned.evermind"
            command = [sys.executable, "-m", "evermind.cli", "tune-embedder"]
            command += ["--model", str(args.tune_from), "--texts", str(lexical_file)]
            command += ["--out", str(model)]
            if args.tune_steps is not None:
                command += ["--steps", str(args.tune_steps)]
            if args.seed is not None:
                command += ["--seed", str(args.seed)]
            start = time.perf_counter()
            done = subprocess.run(command, capture_output=True, text=True, check=False)
            if done.returncode != 0:
                raise RuntimeError(f"tune-embedder failed:\n{done.stderr}")
            tune_s = time.perf_counter() - start
            runs["tune_seconds"] = tune_s
            print(f"tune-embedder: {done.stdout.strip()} ({tune_s:.0f} s)", flush=True)
        if model is not None:
            runs["model"] = anyio.run(run, args.set, model, Path(folder) / "model.db")
        if args.embedder is not None:
            embedder_file = Path(folder) / "embedder.db"
            runs["embedder"] = anyio.run(run, args.set, None, embedder_file, args.embedder)
    print("| ranker | questions | n | recall@1 | recall@5 | MRR (top 5) |")
    print("|---|---|---|---|---|---|")
    scored = {name: result for name, result in runs.items() if isinstance(result, dict)}
    for name, result in scored.items():
        for group in ("all", "exact", "multi", "paraphrase"):
            if group in result:
                row = result[group]
                print(
                    f"| {name} | {group} | {row['n']} | {row['recall@1']:.3f} | "
                    f"{row['recall@5']:.3f} | {row['mrr']:.3f} |"
                )
    for name, result in scored.items():
        seconds = result["seconds"]
        print(
            f"{name}: {result['ranked_by']}; remember {result['remember_ms']:.1f} ms, "
            f"recall {result['recall_ms']:.1f} ms per call "
            f"({seconds['remember']:.1f} s + {seconds['recall']:.1f} s)"
        )
    for name in ("model", "embedder"):
        if name in runs:
            delta = runs[name]["all"]["recall@1"] - runs["lexical"]["all"]["recall@1"]
            print(f"recall@1 with the {name} minus lexical-only: {delta:+.3f}")
    if args.json is not None:
        args.json.write_text(json.dumps(runs, indent=2) + "\n", encoding="utf-8")
    return 0


if __name__ == "__main__":
    sys.exit(main())
