"""Evermind: a memory that any AI agent trains itself, in a browser tab or natively.

The package runs unchanged in CPython and in Pyodide. Browser-safe modules import only
the standard library and ``evermind``; numpy, wgpu and the server stacks are imported only
by native-side modules (see docs/architecture.md).
"""

from __future__ import annotations

__version__ = "0.1.0"

from evermind.errors import EvermindError

__all__ = ["EvermindError", "__version__"]
