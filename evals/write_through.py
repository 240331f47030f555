"""False links of write-through cognition on the memory development set's 155 facts.

The 155 facts of ``memory_recall_dev.jsonl`` are distinct facts under distinct keys, so
stored one after another through :func:`evermind.memory.write_through.remember_through`
(lexical recall, no evidence) each should be *augmented*: any contested, superseded or
confirmed outcome is a false link of the same-subject rule, printed with its summary. The set
holds no true drift pairs, so this measures false links only, and it is a development number
(the rule was not written from this set, but the set is not held out either).

Usage:
    .venv/bin/python -m evals.write_through            # finds the set like every eval
"""

from __future__ import annotations

import argparse
import asyncio
import collections
import json
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
if str(ROOT) not in sys.path:  # run by its file path rather than as ``-m evals.write_through``
    sys.path.insert(0, str(ROOT))

from evals import require  # noqa: E402
from evermind.memory import InMemoryBackend, MemoryStore  # noqa: E402
from evermind.memory.write_through import Remember, remember_through  # noqa: E402

SET_NAME = "memory_recall_dev.jsonl"


async def run(path: Path) -> int:
    facts = [json.loads(line) for line in path.read_text().splitlines() if line.strip()]
    facts = [f for f in facts if f.get("type") == "fact"]
    store = MemoryStore(InMemoryBackend("eval/write-through"))
    counts: collections.Counter[str] = collections.Counter()
    for fact in facts:
        request = Remember.of(fact["key"], fact["content"], fact.get("tags", ()))
        outcome = await remember_through(store, request)
        counts[outcome.action] += 1
        if outcome.action != "augment":
            print(f"false link: {fact['key']}: {outcome.summary}")
    links = len(facts) - counts["augment"]
    print(f"{len(facts)} distinct facts: {dict(counts)}; false links {links}")
    return links


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--eval-dir", type=Path, help="folder of the development sets")
    args = parser.parse_args()
    asyncio.run(run(require(SET_NAME, args.eval_dir)))


if __name__ == "__main__":
    main()
