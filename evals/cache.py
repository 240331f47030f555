"""Reproduces the semantic-cache guard measurement on the development set.

Runs the shared evaluator (``eval_dev.py``, cache part only) with
``evermind.cache.english.default_guard`` on its trigram baseline embedder and prints its
tables, per miss type and domain. Extra arguments are passed through (``--threshold``,
``--json out.json``, ``--embedder module:function``). The evaluator is found in
``--eval-dir``, else ``$EVERMIND_EVAL_DIR``, else ``shared/eval`` next to the checkout.

Usage::

    .venv/bin/python -m evals.cache
    .venv/bin/python -m evals.cache --eval-dir ../shared/eval --json cache.json

The numbers are development numbers: the held-out set decides the real ones.
"""

from __future__ import annotations

import argparse
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:  # run by its file path rather than as ``-m evals.cache``
    sys.path.insert(0, str(ROOT))

from evals import require  # noqa: E402

# The cache's default guard (the English plug-in), imported by eval_dev.py as module:function.
GUARD = "evermind.cache.english:default_guard"


def main(argv: list[str] | None = None) -> int:
    """Runs the evaluator; returns its exit status."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument(
        "--eval-dir",
        type=Path,
        help="the folder of the development sets (default: $EVERMIND_EVAL_DIR, else "
        "shared/eval next to the checkout)",
    )
    args, passthrough = parser.parse_known_args(argv)
    script = require("eval_dev.py", args.eval_dir)
    command = [
        sys.executable,
        str(script),
        "--only",
        "cache",
        "--guard",
        GUARD,
        "--by-type",
        *passthrough,
    ]
    return subprocess.call(command, cwd=ROOT)


if __name__ == "__main__":
    sys.exit(main())
