"""Evermind: a memory that any AI agent trains itself, in a browser tab or natively.

The package runs unchanged in CPython and in Pyodide. Browser-safe modules import only
the standard library and ``evermind``; numpy, wgpu and the server stacks are imported only
by native-side modules (see docs/architecture.md).
"""

from __future__ import annotations

__version__ = "0.1.0"

from typing import TYPE_CHECKING, Any

from evermind.errors import EvermindError

if TYPE_CHECKING:
    from evermind.model.inference import Model


def load(source: Any) -> Model:
    """Loads a ``.evermind`` package (path or bytes) as a CPU model (``model.inference.Model``),
    embedding with the static embedder the package carries, if any
    (``embedder.packaged.load``).

    Native only (numpy); imported lazily so that ``import evermind`` stays browser-safe.
    """
    from evermind.embedder.packaged import load as _load

    return _load(source)


__all__ = ["EvermindError", "__version__", "load"]
