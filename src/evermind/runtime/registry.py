"""Model refs of a tenant, and the models loaded to serve them (native-only).

This module owns :class:`ModelRegistry`: it resolves an id (``evermind/<name>:<version>``
or ``evermind/<name>``, the newest version) to an :class:`~evermind.runtime.installs.Install`
of the caller's tenant, and keeps loaded :class:`~evermind.model.inference.Model` objects in an
LRU bounded by a memory budget. Models load lazily, on first use, in the worker pool, once
even when many requests ask at the same time. A push builds the model before it installs
anything (:func:`servable`: the model is built from the package and runs one token and one
embedding, so a package that reads but cannot be served is refused with the reason) and hands
the built model over (:meth:`ModelRegistry.keep_built`): one push, one parse, one build.
A built model holds its weights once (:func:`build`), and after a load the freed heap goes
back to the system (:func:`release_heap`). Usage counters per model live here too.
"""

from __future__ import annotations

import asyncio
import contextlib
import ctypes
import dataclasses
import functools
import logging
import re
import sys
import time
from collections import OrderedDict
from collections.abc import Callable
from concurrent.futures import Executor
from dataclasses import dataclass
from typing import Any

import numpy as np

from evermind.embedder.packaged import model_of
from evermind.errors import EvermindError, NotFound, PackageError, Unavailable
from evermind.model.inference import Model
from evermind.package import Package, read_package
from evermind.package.int8 import QUANT_FIELD, held_bytes
from evermind.package.static_member import STATIC_FIELD, STATIC_MEMBER
from evermind.runtime.installs import Install, InstallStore

logger = logging.getLogger(__name__)

PREFIX = "evermind/"
_ID = re.compile(
    r"(?:evermind/)?([a-z0-9][a-z0-9._-]{0,63})(?::([A-Za-z0-9][A-Za-z0-9._+-]{0,63}))?"
)
#: Bytes a loaded model holds beyond its float32 weights (tokenizer, numpy overheads).
_OVERHEAD_BYTES = 1 << 20

LoadKey = tuple[str, str, str, str]


class ModelNotFound(NotFound):
    """The id names no model of the caller's tenant (or cannot name a package at all)."""

    code = "model_not_found"


class PackageChanged(Unavailable):
    """An installed package's file no longer has the digest it was installed with."""

    code = "package_changed"


@dataclass
class ModelStats:
    """Usage of one installed model since the server started."""

    requests: int = 0
    prompt_tokens: int = 0
    completion_tokens: int = 0
    embedded_inputs: int = 0
    last_used: float | None = None

    def as_dict(self) -> dict[str, Any]:
        """The JSON form served in ``GET /v1/models/{id}``."""
        return {
            "requests": self.requests,
            "prompt_tokens": self.prompt_tokens,
            "completion_tokens": self.completion_tokens,
            "embedded_inputs": self.embedded_inputs,
            "last_used": self.last_used,
        }


def parse_model_id(model_id: str) -> tuple[str, str | None]:
    """``(name, version or None)`` of ``evermind/<name>[:<version>]`` (prefix optional).

    Raises:
        ModelNotFound: The id cannot name a package.
    """
    match = _ID.fullmatch(model_id.strip()) if isinstance(model_id, str) else None
    if match is None:
        raise ModelNotFound(
            f"model {model_id!r} not found; expected an id like 'evermind/<name>:<version>' or "
            "'evermind/<name>'; hint: GET /v1/models lists yours"
        )
    return match.group(1), match.group(2)


def estimate_bytes(install: Install) -> int:
    """Memory a loaded model of ``install`` holds: its weights once (the CPU model's arrays,
    float32, int8 for an int8 package's quantised ones; :func:`build` drops the package's
    copy) plus a fixed overhead, plus a static embedder's file and the float32 table
    :meth:`~evermind.embedder.static.StaticEmbedder.matrix` builds from it (the package
    keeps the file's bytes and the embedder its stored table: twice the file)."""
    manifest = install.manifest
    held = held_bytes(manifest.get("model", {}), manifest.get(QUANT_FIELD)) + _OVERHEAD_BYTES
    static = manifest.get(STATIC_FIELD)
    if isinstance(static, dict):
        held += 2 * manifest["files"][STATIC_MEMBER]["size"]
        held += 4 * static["vocab_size"] * static["dims"]
    return held


def build(package: Package) -> Model:
    """The served model of a verified ``package``, holding its weights once.

    :class:`~evermind.model.inference.Model` copies the tensors into its CPU model's numpy
    arrays and keeps the package for its manifest, tokenizer and embedding head; serving
    never reads the package's float32 tensors again, so the model keeps the package without
    them (they were as large as the weights).
    """
    model = model_of(package)
    model.package = dataclasses.replace(package, tensors={})
    return model


class ModelRegistry:
    """Resolves ids to installs of a tenant and serves loaded models from an LRU.

    Args:
        installs: The packages on disk.
        budget_bytes: Loaded models beyond this (by :func:`estimate_bytes`) are evicted,
            least recently used first; one model larger than the budget still loads alone.
        executor: Where packages are read and verified (off the event loop).
    """

    def __init__(self, installs: InstallStore, budget_bytes: int, executor: Executor) -> None:
        self.installs = installs
        self.budget_bytes = budget_bytes
        self._executor = executor
        self._loaded: OrderedDict[LoadKey, tuple[Model, int]] = OrderedDict()
        self._loading: dict[LoadKey, asyncio.Future[Model]] = {}
        self.stats: dict[LoadKey, ModelStats] = {}
        self.loads = 0
        self.evictions = 0

    # ------------------------------------------------------------------ refs

    def resolve(self, tenant: str, model_id: str) -> Install:
        """The install ``model_id`` names for ``tenant``.

        Raises:
            ModelNotFound: The tenant has no such model (another tenant's model is reported
                exactly like a missing one).
        """
        name, version = parse_model_id(model_id)
        if version is None:
            install = self.installs.newest(tenant, name)
        else:
            install = self.installs.get(tenant, name, version)
        if install is None:
            raise ModelNotFound(
                f"model {model_id!r} not found; hint: push it first (POST /v1/models) or list "
                "your models with GET /v1/models"
            )
        return install

    @staticmethod
    def key(install: Install) -> LoadKey:
        """The identity of a loaded model (tenant, name, version, digest)."""
        return (install.tenant, install.name, install.version, install.digest)

    def stats_for(self, install: Install) -> ModelStats:
        """The usage counters of ``install`` (created on first use)."""
        return self.stats.setdefault(self.key(install), ModelStats())

    def is_loaded(self, install: Install) -> bool:
        """Whether ``install`` is in memory now."""
        return self.key(install) in self._loaded

    @property
    def loaded_bytes(self) -> int:
        """Estimated memory of every loaded model."""
        return sum(size for _, size in self._loaded.values())

    @property
    def loaded_count(self) -> int:
        """How many models are in memory."""
        return len(self._loaded)

    # ------------------------------------------------------------------ loading

    async def model(self, install: Install) -> Model:
        """The loaded model of ``install``: from the LRU (where a push leaves the model it
        built), or read, verified and built now.

        Must be called on the event loop (the LRU is not locked).

        Raises:
            PackageChanged: The file on disk no longer has the installed digest.
            PackageError: The file on disk no longer reads as a valid package.
        """
        key = self.key(install)
        hit = self._loaded.get(key)
        if hit is not None:
            self._loaded.move_to_end(key)
            return hit[0]
        pending = self._loading.get(key)
        if pending is not None:
            return await asyncio.shield(pending)
        loop = asyncio.get_running_loop()
        future: asyncio.Future[Model] = loop.create_future()
        self._loading[key] = future
        try:
            start = time.perf_counter()
            model = await loop.run_in_executor(self._executor, _load, install)
            logger.info("loaded %s in %.2f s", install.ref, time.perf_counter() - start)
            self.loads += 1
            self._admit(key, model, estimate_bytes(install))
            release_heap_soon(self._executor)  # what the load freed
            future.set_result(model)
            return model
        except BaseException as err:
            future.set_exception(err)
            future.exception()  # mark retrieved: waiters re-raise it, nobody logs it twice
            raise
        finally:
            del self._loading[key]

    def _admit(self, key: LoadKey, model: Model, size: int) -> None:
        self._loaded[key] = (model, size)
        while len(self._loaded) > 1 and self.loaded_bytes > self.budget_bytes:
            old, _ = self._loaded.popitem(last=False)
            self.evictions += 1
            logger.info("evicted %s:%s of tenant %s (memory budget)", old[1], old[2], old[0])

    def keep_built(self, install: Install, model: Model) -> None:
        """Admits ``model``, which a push just built from ``install``'s package (see
        :func:`servable`), as loaded: its first use does not read the file again.

        It counts against the memory budget like any loaded model (the least recently used
        ones are evicted beyond it). Must be called on the event loop.
        """
        key = self.key(install)
        if model.fingerprint != install.digest or key in self._loaded or key in self._loading:
            return
        self._admit(key, model, estimate_bytes(install))

    def unload(self, install: Install) -> None:
        """Drops ``install``'s model from memory (after a delete)."""
        self._loaded.pop(self.key(install), None)
        self.stats.pop(self.key(install), None)


def servable(package: Package) -> Model:
    """Builds the model of a verified ``package`` and proves it can serve: every weight
    finite, one greedy token generated, one text embedded to a finite vector.

    Everything serving reads is read here: the config's fields, the tokenizer's model and
    merges, the weights and the embedding head. Runs in the worker pool.

    Raises:
        PackageError: The package cannot be served; the message names the part.
    """
    try:
        model = build(package)
    except PackageError:
        raise
    except (EvermindError, ValueError, TypeError, KeyError, IndexError, OverflowError) as err:
        raise PackageError(f"cannot be served: {type(err).__name__}: {err}") from err
    for name, values in model.cpu.params.items():
        if not np.all(np.isfinite(values)):
            raise PackageError(f"cannot be served: tensor {name!r} holds NaN or infinite values")
    try:
        model.complete("The", max_new_tokens=1, temperature=0.0)
        vector = model.embed(["The"])
    except (EvermindError, ValueError, TypeError, KeyError, IndexError, OverflowError) as err:
        raise PackageError(
            f"cannot be served: generating one token failed: {type(err).__name__}: {err}"
        ) from err
    if not np.all(np.isfinite(vector)):
        raise PackageError("cannot be served: its embedding of a text is not finite")
    return model


def release_heap() -> None:
    """Hands freed heap memory back to the system (glibc's ``malloc_trim``).

    A push or a load allocates and frees about twice the package's size in a worker thread;
    glibc keeps those freed arenas mapped (and raises its mmap threshold after large frees),
    so without this the server's resident memory stays at the push's peak. Runs in the
    worker pool, after the work whose memory it returns. Skipped where the C library has no
    ``malloc_trim`` (macOS, Windows, musl).
    """
    trim = _malloc_trim()
    if trim is not None:
        trim(0)


def release_heap_soon(executor: Executor) -> None:
    """Queues :func:`release_heap` on the worker pool, after the work queued before it (a
    no-op once the pool is shut down)."""
    with contextlib.suppress(RuntimeError):
        executor.submit(release_heap)


@functools.cache
def _malloc_trim() -> Callable[[int], int] | None:
    if not sys.platform.startswith("linux"):
        return None
    try:
        trim = ctypes.CDLL("libc.so.6").malloc_trim
    except (OSError, AttributeError):
        return None
    trim.argtypes = [ctypes.c_size_t]
    trim.restype = ctypes.c_int
    return trim


def _load(install: Install) -> Model:
    package = read_package(install.path)
    if package.digest != install.digest:
        raise PackageChanged(
            f"installed package {install.ref} changed on disk (digest {package.digest}, "
            f"installed {install.digest}); hint: push it again"
        )
    return build(package)
