"""A host's own memory backend behind ``--store python:package.module:factory`` (native-only).

A host that keeps memory somewhere Evermind has no engine for (its own database, a service)
plugs it in by naming a factory: ``evermind mcp --store python:acme.memory:make_backend`` (also
``--http``, ``evermind ingest``, ``install-mcp`` and the Claude Code hooks). The factory is
imported from the running interpreter's path and called once per namespace served::

    def make_backend(namespace: str) -> MemoryBackend: ...

``namespace`` is ``<tenant>/<namespace>`` (``default/default`` unless named; over ``--http``
one per token's tenant), the same names a SQLite memory file gives them: the backend must keep
namespaces apart, which is the tenancy. What it returns must implement the
:class:`~evermind.memory.backend.MemoryBackend` protocol (docs/mcp.md, "Your own backend"): a
``namespace`` attribute and the async methods :data:`REQUIRED_METHODS`; an optional async
``prompt_matches`` answers the hooks from the backend's own text index. :func:`check_backend`
validates it when the store is opened, and a backend that lacks something is one error line
naming what is missing, before any tool is served.
"""

from __future__ import annotations

import importlib
import inspect
from collections.abc import Callable
from typing import Any

from evermind.errors import ConfigError, StorageError
from evermind.memory.backend import MemoryBackend
from evermind.memory.store import MemoryStore

__all__ = [
    "PLUGIN_PREFIX",
    "REQUIRED_METHODS",
    "PluginMemory",
    "check_backend",
    "is_plugin",
    "load_factory",
    "parse_plugin",
]

#: What starts a ``--store`` that names a host's factory.
PLUGIN_PREFIX = "python:"
#: The async methods every backend must have (the ``MemoryBackend`` protocol).
REQUIRED_METHODS = (
    "apply",
    "get",
    "load_all",
    "version",
    "delete_expired",
    "get_vectors",
    "put_vectors",
    "close",
)
#: Methods a backend may have; when present they must be async too.
OPTIONAL_METHODS = ("prompt_matches",)


def is_plugin(store: object) -> bool:
    """Whether ``store`` (a ``--store`` value) names a host's factory."""
    return isinstance(store, str) and store.lower().startswith(PLUGIN_PREFIX)


def parse_plugin(spec: str) -> tuple[str, str]:
    """``python:package.module:factory`` as ``(module, attribute)``.

    Raises:
        ConfigError: It is not of that form (one line, with the expected form).
    """
    rest = spec[len(PLUGIN_PREFIX) :] if is_plugin(spec) else ""
    module, sep, attribute = rest.rpartition(":")
    dotted = [*module.split("."), *attribute.split(".")]
    if not sep or not all(part.isidentifier() for part in dotted):
        raise ConfigError(
            f"--store: {spec!r} does not name a factory; expected "
            "python:package.module:factory (a function of the namespace returning a "
            "MemoryBackend)",
            code="bad_store_plugin",
        )
    return module, attribute


def load_factory(spec: str) -> Callable[[str], Any]:
    """Imports the factory ``spec`` names.

    Raises:
        ConfigError: A bad spec, a module that does not import, no such attribute, or one
            that is not callable.
    """
    module_name, attribute = parse_plugin(spec)
    try:
        module = importlib.import_module(module_name)
    except Exception as err:  # any import-time failure of the host's module
        raise ConfigError(
            f"--store {spec}: cannot import module {module_name!r} "
            f"({type(err).__name__}: {' '.join(str(err).split())}); hint: is it on this "
            "interpreter's path (installed, or on PYTHONPATH)?",
            code="bad_store_plugin",
        ) from err
    found: Any = module
    for part in attribute.split("."):
        if not hasattr(found, part):
            raise ConfigError(
                f"--store {spec}: module {module_name!r} has no attribute {attribute!r}",
                code="bad_store_plugin",
            )
        found = getattr(found, part)
    if not callable(found):
        raise ConfigError(
            f"--store {spec}: {attribute!r} is a {type(found).__name__}, not a callable "
            "factory of the namespace",
            code="bad_store_plugin",
        )
    factory: Callable[[str], Any] = found
    return factory


def check_backend(backend: object, spec: str, namespace: str) -> MemoryBackend:
    """Returns ``backend`` if it implements the ``MemoryBackend`` protocol.

    Raises:
        ConfigError: One line naming everything it lacks: the ``namespace`` attribute (equal
            to the namespace asked for), a required method, or a method that is not async.
    """
    problems = []
    got = getattr(backend, "namespace", None)
    if got != namespace:
        problems.append(f"namespace attribute {namespace!r} (has {got!r})")
    missing = [name for name in REQUIRED_METHODS if not callable(getattr(backend, name, None))]
    if missing:
        problems.append("async method" + ("s " if len(missing) > 1 else " ") + ", ".join(missing))
    present = [
        name
        for name in (*REQUIRED_METHODS, *OPTIONAL_METHODS)
        if callable(getattr(backend, name, None))
    ]
    blocking = [n for n in present if not inspect.iscoroutinefunction(getattr(backend, n))]
    if blocking:
        problems.append("async (not plain) " + ", ".join(blocking))
    if problems:
        raise ConfigError(
            f"--store {spec}: the backend it made ({type(backend).__name__}) is not a "
            f"MemoryBackend: it needs {'; '.join(problems)}; see docs/mcp.md, "
            "'Your own backend'",
            code="bad_store_plugin",
        )
    assert isinstance(backend, MemoryBackend)  # every member checked above
    return backend


class PluginMemory:
    """A host's backend factory as a source of memory stores, one per tenant.

    The same shape as :class:`~evermind.memory.shared_memory.SharedMemory`: enter it (the
    factory is imported then), ask for :meth:`store` per tenant, exit it.

    Args:
        spec: ``python:package.module:factory``.
        embedder: What each store embeds with (None: lexical recall only).
        namespace: The tenants' namespace (the backend gets ``<tenant>/<namespace>``).
    """

    def __init__(self, spec: str, embedder: Any, *, namespace: str) -> None:
        parse_plugin(spec)
        self.spec = spec
        self.embedder = embedder
        self.namespace = namespace
        self._factory: Callable[[str], Any] | None = None

    async def __aenter__(self) -> PluginMemory:
        """Imports the factory.

        Raises:
            ConfigError: It cannot be imported (see :func:`load_factory`).
        """
        self._factory = load_factory(self.spec)
        return self

    async def __aexit__(self, *exc: object) -> None:
        self._factory = None

    def store(self, tenant: str) -> MemoryStore:
        """A new memory store over the backend the factory makes for ``tenant``.

        Raises:
            ConfigError: The factory failed, or made something that is not a backend.
            StorageError: Called outside ``async with``.
        """
        if self._factory is None:
            raise StorageError(
                f"--store {self.spec}: the factory is not loaded; open the source with "
                f"`async with` before asking for tenant {tenant!r}'s store"
            )
        namespace = f"{tenant}/{self.namespace}"
        try:
            made = self._factory(namespace)
        except Exception as err:  # the host's code: say whose failure it was
            raise ConfigError(
                f"--store {self.spec}: the factory failed for namespace {namespace!r} "
                f"({type(err).__name__}: {' '.join(str(err).split())})",
                code="bad_store_plugin",
            ) from err
        return MemoryStore(check_backend(made, self.spec, namespace), self.embedder)
