"""The Mamba language model: definition, deterministic init and the numpy CPU model.

Browser-safe exports live here (``MambaConfig``, ``PRESETS``, ``init_params``); the numpy CPU
model is native-only and imported explicitly from :mod:`evermind.model.cpu` so that importing
``evermind.model`` in Pyodide never pulls in numpy.
"""

from __future__ import annotations

from evermind.model.config import PRESETS, MambaConfig
from evermind.model.init import init_params

__all__ = ["PRESETS", "MambaConfig", "init_params"]
