"""A loaded package with the static embedder it carries (native-only: numpy).

``static_embedder.safetensors`` (docs/format.md) is checked by the package reader for its
structure only: the package layer sits below this one and cannot build a
:class:`~evermind.embedder.static.StaticEmbedder`. :func:`model_of` builds it from the
package's file and hands it to :class:`~evermind.model.inference.Model`, whose
:meth:`~evermind.model.inference.Model.embed` then uses it; :func:`load` is
``evermind.load``. A package without the member loads as before.
"""

from __future__ import annotations

import os

from evermind.embedder.static import StaticEmbedder
from evermind.model.inference import Model
from evermind.package import Package, read_package
from evermind.package.static_member import STATIC_MEMBER


def model_of(package: Package) -> Model:
    """``package`` as a :class:`Model`, embedding with its static embedder when it has one.

    Raises:
        PackageError: The member's vocabulary is not a WordPiece vocabulary.
    """
    carried = package.static_embedder
    if carried is None:
        return Model(package)
    embedder = StaticEmbedder.from_bytes(carried.data, name=f"{package.ref} {STATIC_MEMBER}")
    return Model(package, text_embedder=embedder)


def load(source: bytes | bytearray | memoryview | str | os.PathLike[str]) -> Model:
    """Reads, verifies and loads a ``.evermind`` package (path or bytes): ``evermind.load``."""
    return model_of(read_package(source))


__all__ = ["load", "model_of"]
