"""``python -m evermind.cli``: the ``evermind`` command (native-only)."""

from __future__ import annotations

import sys

from evermind.cli import main

sys.exit(main())
