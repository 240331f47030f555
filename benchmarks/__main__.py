"""``python -m benchmarks kernels|train|serve [options]``: ``evermind bench`` without the CLI."""

from __future__ import annotations

import sys

from benchmarks import main
from evermind.errors import EvermindError

try:
    code = main(sys.argv[1:])
except EvermindError as err:
    print(f"error: {err}", file=sys.stderr)
    code = 2
sys.exit(code)
