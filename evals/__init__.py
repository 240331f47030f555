"""Quality measurements on the development sets, outside the installed package.

- :mod:`evals.cache`: the semantic-cache guard on ``cache_pairs_dev.jsonl`` (the shared
  evaluator ``eval_dev.py``);
- :mod:`evals.memory`: ``MemoryStore.recall`` on ``memory_recall_dev.jsonl``;
- :mod:`evals.mcp_recall`: the same set through the MCP tool over stdio;
- :mod:`evals.write_through`: false links of write-through cognition on that set's facts;
- :mod:`evals.quality`: memory and cache tables, lexical vs Evermind vs hybrid.
- :mod:`evals.retrieval`: ``EnterpriseRetriever`` on ``retrieval_set.jsonl`` (in the
  repository, over the ingest fixtures): answer and refusal rates, through the harness.
- :mod:`evals.affect`: the affect head on ``affect_dev.jsonl`` (in the repository: 150
  labelled sentences) against a bag-of-words logistic baseline.
- :mod:`evals.cache_corpus`: the cache's development corpus (in the repository: written
  triples, public pairs when licensed, a fixed sha256 tune/report split) and its check,
  ``python -m evals.cache_corpus.check``; the report split is never read case by case.
- :mod:`evals.conversation_memory`: long multi-session dialogues written for this project (in
  the repository, a fixed sha256 tune/report split by dialogue), ``MemoryStore.recall``'s
  recall@5/@10, MRR and stale@1 per question kind; its check is
  ``python -m evals.conversation_memory.check``.

Run each as ``python -m evals.<name> --help`` from the checkout's root (or by its file path).
The sets are not in the repository: every script finds them with :func:`find` /
:func:`require`, in ``$EVERMIND_EVAL_DIR`` when it is set, else in the ``shared/eval`` folder
next to the checkout. These are development numbers; the held-out set decides the real ones.
"""

from __future__ import annotations

import json
import os
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

#: The environment variable naming the folder of the development sets.
ENV_VAR = "EVERMIND_EVAL_DIR"
#: The checkout, and the shared folder next to it that holds the sets by default.
ROOT = Path(__file__).resolve().parents[1]
SHARED_EVAL = ROOT.parent / "shared" / "eval"


def eval_dir(folder: Path | None = None) -> Path:
    """The folder of the development sets: ``folder`` when given (a script's
    ``--eval-dir``), else ``$EVERMIND_EVAL_DIR`` when set, else ``shared/eval`` next to the
    checkout."""
    if folder is not None:
        return folder
    env = os.environ.get(ENV_VAR)
    return Path(env) if env else SHARED_EVAL


def find(name: str, folder: Path | None = None) -> Path:
    """Where the file ``name`` of the development sets is (see :func:`eval_dir`); it may not
    exist: :func:`require` checks."""
    return eval_dir(folder) / name


def require(name: str, folder: Path | None = None) -> Path:
    """:func:`find`, or exit with status 2 and a message naming where it looked and why."""
    path = find(name, folder)
    if not path.is_file():
        env = os.environ.get(ENV_VAR)
        source = (
            "--eval-dir"
            if folder is not None
            else f"${ENV_VAR}"
            if env
            else f"the default, shared/eval next to the checkout (${ENV_VAR} is not set)"
        )
        print(
            f"error: {name} is not in {path.parent} ({source}); set ${ENV_VAR} to the folder "
            f"of the development sets, or put them in {SHARED_EVAL}",
            file=sys.stderr,
        )
        raise SystemExit(2)
    return path


def jsonl_objects(path: Path, error: type[Exception]) -> Iterator[tuple[int, dict[str, Any]]]:
    """Each non-blank line of the JSONL file ``path`` as (line number, JSON object): the one
    reader of the sets written for this project (``cache_corpus``, ``conversation_memory``).

    Raises:
        error: A line is not JSON, or not a JSON object (named by file and line).
    """
    with path.open(encoding="utf-8") as handle:
        for number, line in enumerate(handle, start=1):
            if not line.strip():
                continue
            try:
                record = json.loads(line)
            except json.JSONDecodeError as err:
                raise error(f"{path.name}:{number}: not JSON ({err.msg})") from err
            if not isinstance(record, dict):
                raise error(
                    f"{path.name}:{number}: expected a JSON object, got {type(record).__name__}"
                )
            yield number, record
