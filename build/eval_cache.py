"""Reproduces the semantic-cache guard measurement on the development set.

Runs the shared evaluator (``eval_dev.py``, cache part only) with
``evermind.cache.guards.default_guard`` on its trigram baseline embedder and prints its
tables, per miss type and domain. Extra arguments are passed through (``--threshold``,
``--json out.json``, ``--embedder module:function``).

Usage::

    .venv/bin/python build/eval_cache.py
    .venv/bin/python build/eval_cache.py --eval-dir /work/shared/eval --json cache.json

The numbers are development numbers: the held-out set decides the real ones.
"""

from __future__ import annotations

import argparse
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
GUARD = ROOT / "src" / "evermind" / "cache" / "guards.py"


def main(argv: list[str] | None = None) -> int:
    """Runs the evaluator; returns its exit status."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--eval-dir", type=Path, default=Path("/work/shared/eval"))
    args, passthrough = parser.parse_known_args(argv)
    script = args.eval_dir / "eval_dev.py"
    if not script.is_file():
        print(f"eval_cache: {script} not found; pass --eval-dir", file=sys.stderr)
        return 2
    command = [
        sys.executable,
        str(script),
        "--only",
        "cache",
        "--guard",
        f"{GUARD}:default_guard",
        "--by-type",
        *passthrough,
    ]
    return subprocess.call(command, cwd=ROOT)


if __name__ == "__main__":
    sys.exit(main())
