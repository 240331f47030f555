"""Embedders for the evaluations: the MiniLM teacher, an Evermind package, a collapsed one.

Each helper returns (or is) a function ``texts -> vectors`` that the evaluators hand to
``MemoryStore`` as its embedder. Vectors are memoised per text within the process, so one
script can rank the same set several ways without re-embedding it.

- :func:`minilm`: all-MiniLM-L6-v2 through ``evermind.train.teachers.MiniLMTeacher`` (offline,
  from the venv's local copy);
- :func:`package`: an ``.evermind`` package's ``Model.embed``;
- :func:`static`: a base embedder file (``evermind build-embedder``'s output,
  :class:`evermind.embedder.static.StaticEmbedder`);
- :func:`model2vec`: a model2vec ``StaticModel`` saved in a folder (the PyPI ``model2vec``
  library, the baseline the base embedder is measured against);
- :func:`collapsed`: a deliberately useless embedder, one constant vector plus a little noise
  (every pair of texts scores ~0.99), for checking that fusion and the relevance floor ignore it.

:func:`resolve` turns a command-line spec into one of these: ``minilm``, ``collapsed``,
``package:PATH`` (or a path ending in ``.evermind``), ``static:PATH`` (a base embedder
file), ``model2vec:FOLDER``, or ``module:function`` /
``file.py:function`` for anything else.
"""

from __future__ import annotations

import importlib
import importlib.util
import os
import sys
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

#: ``texts -> one vector per text``.
EmbedFn = Callable[[Sequence[str]], Any]


def memoised(function: EmbedFn) -> EmbedFn:
    """Wraps ``function`` so each distinct text is embedded once per process."""
    seen: dict[str, list[float]] = {}

    def embed(texts: Sequence[str]) -> list[list[float]]:
        missing = list(dict.fromkeys(t for t in texts if t not in seen))
        if missing:
            for text, row in zip(missing, function(missing), strict=True):
                seen[text] = [float(x) for x in row]
        return [seen[t] for t in texts]

    return embed


_teacher: list[Any] = []


def _minilm_raw(texts: Sequence[str]) -> Any:
    if not _teacher:
        from evermind.train.teachers import MiniLMTeacher

        _teacher.append(MiniLMTeacher())
    return _teacher[0].embed(list(texts))


#: all-MiniLM-L6-v2 (384-d, unit vectors), loaded on first use.
minilm = memoised(_minilm_raw)


def package(path: str | os.PathLike[str]) -> EmbedFn:
    """The embedder of the ``.evermind`` package at ``path`` (loaded on first use)."""
    loaded: list[Any] = []

    def raw(texts: Sequence[str]) -> Any:
        if not loaded:
            import evermind

            loaded.append(evermind.load(path))
        return loaded[0].embed(list(texts))

    return memoised(raw)


def static(path: str | os.PathLike[str]) -> EmbedFn:
    """The base embedder in the file at ``path`` (loaded on first use; numpy path)."""
    loaded: list[Any] = []

    def raw(texts: Sequence[str]) -> Any:
        if not loaded:
            from evermind.embedder.static import StaticEmbedder

            loaded.append(StaticEmbedder.load(path))
        return loaded[0].embed_numpy(list(texts))

    return memoised(raw)


def model2vec(folder: str | os.PathLike[str]) -> EmbedFn:
    """The model2vec ``StaticModel`` saved in ``folder`` (loaded on first use, offline)."""
    loaded: list[Any] = []

    def raw(texts: Sequence[str]) -> Any:
        if not loaded:
            from model2vec import StaticModel

            loaded.append(StaticModel.from_pretrained(os.fspath(folder)))
        return loaded[0].encode(list(texts))

    return memoised(raw)


def collapsed(texts: Sequence[str]) -> list[list[float]]:
    """A collapsed embedder: one constant direction plus per-text noise (the cache
    evaluation's :func:`evals.cache_full.collapsed_vector`)."""
    from evals.cache_full import collapsed_vector

    return [collapsed_vector(text) for text in texts]


def load_callable(spec: str) -> EmbedFn:
    """Imports ``module:function`` or ``path/to/file.py:function``."""
    module_part, _, attr = spec.rpartition(":")
    if not module_part or not attr:
        raise SystemExit(f"--embedder: expected module:function, got {spec!r}")
    if module_part.endswith(".py"):
        spec_obj = importlib.util.spec_from_file_location(Path(module_part).stem, module_part)
        if spec_obj is None or spec_obj.loader is None:
            raise SystemExit(f"--embedder: cannot load {module_part!r}")
        module = importlib.util.module_from_spec(spec_obj)
        spec_obj.loader.exec_module(module)
    else:
        sys.path.insert(0, os.getcwd())
        module = importlib.import_module(module_part)
    function: EmbedFn | None = getattr(module, attr, None)
    if function is None or not callable(function):
        raise SystemExit(f"--embedder: {spec!r} is not callable")
    return function


def resolve(spec: str) -> tuple[str, EmbedFn]:
    """``(display name, embedder)`` for a command-line spec (see the module docstring)."""
    if spec == "minilm":
        return "minilm", minilm
    if spec == "collapsed":
        return "collapsed", collapsed
    if spec.startswith("static:"):
        path = spec.removeprefix("static:")
        return f"static:{Path(path).stem}", static(path)
    if spec.startswith("model2vec:"):
        folder = spec.removeprefix("model2vec:")
        return f"model2vec:{Path(folder).name}", model2vec(folder)
    if spec.startswith("package:") or spec.endswith(".evermind"):
        path = spec.removeprefix("package:")
        return Path(path).stem, package(path)
    return spec, memoised(load_callable(spec))
