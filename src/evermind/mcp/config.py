"""Settings of the MCP memory server: caps, read-only mode, and where the memory file lives.

Owns :class:`ServerConfig` (the server-side caps that keep recall cheap in tokens), the
resolution of the memory file every MCP host shares (``--memory-file``, else the
``EVERMIND_MEMORY_FILE`` environment variable, else the runtime's database ``runtime.db`` in
the per-user data directory) and the namespace convention shared with the runtime: the
memories of tenant ``T``'s namespace ``N`` are the store namespace ``T/N``, so ``evermind mcp``
and ``evermind serve`` see the same memories. Native-only.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

from evermind.errors import ConfigError
from evermind.paths import data_dir

#: Environment variable naming the memory file (overridden by ``--memory-file``).
MEMORY_FILE_ENV = "EVERMIND_MEMORY_FILE"
#: Environment variable naming a ``.evermind`` package to embed with (overridden by ``--model``).
MODEL_ENV = "EVERMIND_MODEL"
#: Environment variable that opts in to the experience tools (``1``; overridden by the flag).
EXPERIENCE_ENV = "EVERMIND_EXPERIENCE"
#: File name of the memory database inside the data directory (the runtime's database).
MEMORY_FILE_NAME = "runtime.db"
#: The tenant and namespace used when none is named (the runtime's defaults).
DEFAULT_TENANT = "default"
DEFAULT_NAMESPACE = "default"


def store_namespace(tenant: str = DEFAULT_TENANT, namespace: str = DEFAULT_NAMESPACE) -> str:
    """The memory-store namespace of ``tenant``'s ``namespace``, as the runtime names it.

    Raises:
        ConfigError: Either part is empty or not printable.
    """
    for what, value in (("tenant", tenant), ("namespace", namespace)):
        if not value or not value.isprintable() or len(value) > 256:
            raise ConfigError(f"{what}: expected 1-256 printable characters, got {value!r}")
    return f"{tenant}/{namespace}"


@dataclass(frozen=True)
class ServerConfig:
    """Server-side limits and mode of one MCP memory server.

    Attributes:
        max_results: Most hits ``memory_recall`` / ``memory_recall_by_tag`` return; a larger
            ``top_k`` / ``limit`` is capped to it (and the answer says so).
        default_results: ``top_k`` / ``limit`` when the caller gives none.
        max_chars: Longest content preview per hit, in characters; longer text is cut and
            ends with an ellipsis. ``memory_get`` returns the full text.
        max_content_chars: Longest content ``memory_remember`` and ``memory_restore`` accept.
        readonly: Serve only the read tools (no ``memory_remember`` / ``memory_forget``).
        experience: Serve the experience tools (episodes, skills, runs, ``experience_train``);
            off unless opted in (``--experience`` or ``EVERMIND_EXPERIENCE=1``).
        max_runs: Runs kept per tenant by the experience store; older ones are pruned.
        workspace_root: The folder ``memory_remember`` checks the files a conflicting fact
            names in (``--workspace-root``); never read outside it. None: no file evidence.
        probe_http: Whether ``memory_remember`` GETs the URLs a conflicting fact names
            (``--probe-http``; off: a write must not make the server fetch arbitrary URLs).

    Raises:
        ConfigError: A limit is not a positive integer, or the default exceeds the maximum.
    """

    max_results: int = 10
    default_results: int = 5
    max_chars: int = 300
    max_content_chars: int = 20_000
    readonly: bool = False
    experience: bool = False
    max_runs: int = 500
    workspace_root: Path | None = None
    probe_http: bool = False

    def __post_init__(self) -> None:
        for name in (
            "max_results",
            "default_results",
            "max_chars",
            "max_content_chars",
            "max_runs",
        ):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, int) or value < 1:
                raise ConfigError(f"ServerConfig: {name} must be a positive integer, got {value!r}")
        if self.default_results > self.max_results:
            raise ConfigError(
                f"ServerConfig: default_results ({self.default_results}) exceeds max_results "
                f"({self.max_results}); hint: raise --max-results or lower the default"
            )


def experience_enabled(env: Mapping[str, str] | None = None) -> bool:
    """Whether ``$EVERMIND_EXPERIENCE`` opts in to the experience tools (``1``/``true``/``yes``).

    Raises:
        ConfigError: The variable is set to something else than a yes or a no.
    """
    env = os.environ if env is None else env
    value = env.get(EXPERIENCE_ENV, "").strip().lower()
    if value in ("", "0", "false", "no", "off"):
        return False
    if value in ("1", "true", "yes", "on"):
        return True
    raise ConfigError(
        f"{EXPERIENCE_ENV}: expected 1 or 0, got {value!r}; hint: export {EXPERIENCE_ENV}=1 to "
        "serve the experience tools"
    )


def resolve_memory_file(
    explicit: str | os.PathLike[str] | None, env: Mapping[str, str] | None = None
) -> Path:
    """Returns the absolute memory file: ``explicit``, else ``$EVERMIND_MEMORY_FILE``, else default.

    Raises:
        ConfigError: The path names an existing directory.
    """
    env = os.environ if env is None else env
    chosen = explicit or env.get(MEMORY_FILE_ENV) or data_dir(env) / MEMORY_FILE_NAME
    path = Path(chosen).expanduser().absolute()
    if path.is_dir():
        raise ConfigError(
            f"memory file: expected a file path, got the directory {path}; "
            f"hint: pass --memory-file {path / MEMORY_FILE_NAME}"
        )
    return path


def resolve_store(explicit: str | None, env: Mapping[str, str] | None = None) -> Path | str:
    """What ``--store`` names: a SQLite memory file (a path, ``sqlite:///PATH`` or nothing: the
    default of :func:`resolve_memory_file`), or the URL of a shared store (``postgresql://…``,
    ``qdrant://…``, ``memory://``; checked by
    :func:`~evermind.vectorstore.shared.check_store_url`, the one list of schemes), or a host's
    backend factory (``python:package.module:factory``, :mod:`evermind.memory.plugin`).

    ``sqlite:///rel.db`` is the relative path ``rel.db``; ``sqlite:////abs.db`` is ``/abs.db``.

    Raises:
        ConfigError: An unknown scheme (one line naming the accepted ones), a malformed
            factory spec, or a directory.
    """
    if explicit and explicit.lower().startswith("python:"):
        from evermind.memory.plugin import parse_plugin

        parse_plugin(explicit)
        return explicit
    if explicit and "://" in explicit:
        scheme, _, rest = explicit.partition("://")
        if scheme.lower() != "sqlite":
            from evermind.vectorstore.shared import check_store_url

            return check_store_url(explicit, sqlite_too=True)
        explicit = rest[1:] if rest.startswith("/") else rest
    return resolve_memory_file(explicit or None, env)


def resolve_model_file(
    explicit: str | os.PathLike[str] | None, env: Mapping[str, str] | None = None
) -> Path | None:
    """Returns the absolute ``.evermind`` package to embed with, or None for lexical recall.

    Raises:
        ConfigError: A model path was given but no such file exists.
    """
    env = os.environ if env is None else env
    chosen = explicit or env.get(MODEL_ENV)
    if not chosen:
        return None
    path = Path(chosen).expanduser().absolute()
    if not path.is_file():
        source = "--model" if explicit else MODEL_ENV
        raise ConfigError(
            f"{source}: expected a .evermind package file, got {str(path)!r} which does not "
            "exist; hint: export one from the Studio or pass the path of a pushed package"
        )
    return path


__all__ = [
    "DEFAULT_NAMESPACE",
    "DEFAULT_TENANT",
    "EXPERIENCE_ENV",
    "MEMORY_FILE_ENV",
    "MEMORY_FILE_NAME",
    "MODEL_ENV",
    "ServerConfig",
    "data_dir",
    "experience_enabled",
    "resolve_memory_file",
    "resolve_model_file",
    "resolve_store",
    "store_namespace",
]
