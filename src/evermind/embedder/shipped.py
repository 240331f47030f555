"""The base embedder the wheel ships, and the ``--embedder base|PATH`` choice (native-only).

``base`` names ``data/base-embedder.safetensors`` inside this package (what ``evermind
build-embedder`` wrote for the release, see docs/embedder.md), read through
:mod:`importlib.resources` so that an installed wheel finds it as a checkout does; any other
value is the path of an embedder file. :func:`load_embedder_spec` reads either into a
:class:`~evermind.embedder.static.StaticEmbedder`, whose ``fingerprint`` and ``embed(texts)``
make it a memory store's embedder as it is.
"""

from __future__ import annotations

import os
from importlib import resources
from pathlib import Path

from evermind.embedder.static import StaticEmbedder
from evermind.errors import InputError

#: The ``--embedder`` value that names the shipped base embedder.
BASE = "base"
#: Its file, under ``evermind/embedder/data``.
BASE_FILE = "base-embedder.safetensors"


def base_bytes() -> bytes:
    """The shipped base embedder file's bytes.

    Raises:
        InputError: The file is missing from the installed package.
    """
    resource = resources.files("evermind.embedder").joinpath("data", BASE_FILE)
    try:
        return resource.read_bytes()
    except OSError as err:
        raise InputError(
            f"--embedder base: the shipped embedder file {BASE_FILE} is missing from this "
            f"install ({err.strerror}); hint: reinstall evermind, or pass --embedder PATH of a "
            "file evermind build-embedder wrote"
        ) from err


def spec_path(spec: str) -> str:
    """``base``, or the absolute path of the embedder file ``spec`` names (as given when it is
    ``base``): what a registered command line should carry.

    Raises:
        InputError: ``spec`` is empty, or names no file.
    """
    if spec == BASE:
        return spec
    if not spec:
        raise InputError("--embedder: expected 'base' or the path of an embedder file, got ''")
    path = Path(os.path.abspath(Path(spec).expanduser()))  # '..' folded, links kept
    if not path.is_file():
        raise InputError(
            f"--embedder: expected 'base' or an embedder file (.safetensors written by evermind "
            f"build-embedder), got {os.fspath(path)!r} which does not exist"
        )
    return os.fspath(path)


def load_embedder_spec(spec: str) -> StaticEmbedder:
    """The embedder ``--embedder spec`` names: the shipped base, or the file at a path.

    Raises:
        InputError: No such file, or it cannot be read.
        PackageError: The file is not an embedder file (wrong format, corrupt, truncated).
    """
    return spec_file(spec)[0]


def spec_file(spec: str) -> tuple[StaticEmbedder, bytes]:
    """:func:`load_embedder_spec` and the file's bytes (what a package stores).

    Raises:
        InputError: No such file, or it cannot be read.
        PackageError: The file is not an embedder file (wrong format, corrupt, truncated).
    """
    if spec == BASE:
        data = base_bytes()
        return StaticEmbedder.from_bytes(data, name=f"--embedder base ({BASE_FILE})"), data
    path = spec_path(spec)
    data = _read(path)
    return StaticEmbedder.from_bytes(data, name=f"--embedder {path}"), data


def _read(path: str) -> bytes:
    try:
        return Path(path).read_bytes()
    except OSError as err:
        raise InputError(f"--embedder {path}: {err.strerror}") from err


__all__ = ["BASE", "BASE_FILE", "base_bytes", "load_embedder_spec", "spec_file", "spec_path"]
