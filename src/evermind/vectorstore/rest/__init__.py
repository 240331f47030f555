"""REST vector-store dialects: the registry, and :func:`open_rest_store` that picks one by URL.

A URL ``<dialect>+https://host[:port]`` (or ``+http`` for a store on this machine, such as
Pinecone Local) names a dialect in :data:`DIALECTS` and the store's address; the port's
``name`` becomes the dialect's namespace. The API key comes from the URL's userinfo
(``pinecone+https://:KEY@host``; a bare ``KEY@host`` too) or else from the dialect's
environment variable (``PINECONE_API_KEY``, ``EVERMIND_TOKEN``; ``?key_env=NAME`` names
another); errors print the
address without it. See docs/vectorstore.md, "REST dialects".

This module and the dialects are standard library only; the HTTP (httpx) is imported by
:func:`open_rest_store` when a store opens.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any
from urllib.parse import parse_qsl, unquote, urlsplit

from evermind.errors import ConfigError
from evermind.vectorstore.rest.dialect import Dialect
from evermind.vectorstore.rest.evermind import EvermindDialect
from evermind.vectorstore.rest.pinecone import PineconeDialect

if TYPE_CHECKING:
    from evermind.vectorstore.rest.store import RestStore

__all__ = ["DIALECTS", "SCHEMES", "DialectSpec", "open_rest_store", "parse_rest_url"]


@dataclass(frozen=True)
class DialectSpec:
    """One registered dialect.

    Attributes:
        name: The URL scheme's first half (``pinecone``).
        key_env: The environment variable its API key is read from by default.
        form: The URL form docs and errors show.
        make: ``make(namespace, api_key)`` → the dialect.
    """

    name: str
    key_env: str
    form: str
    make: Callable[[str, str | None], Dialect]


DIALECTS: dict[str, DialectSpec] = {
    "pinecone": DialectSpec(
        "pinecone", "PINECONE_API_KEY", "pinecone+https://INDEX_HOST", PineconeDialect
    ),
    "evermind": DialectSpec(
        "evermind", "EVERMIND_TOKEN", "evermind+http://host:port", EvermindDialect
    ),
}
#: The URL schemes of the REST dialects: ``<dialect>+https`` and ``<dialect>+http``.
SCHEMES = tuple(f"{name}+{transport}" for name in DIALECTS for transport in ("https", "http"))
_QUERY_KEYS = ("key_env",)


@dataclass(frozen=True)
class RestUrl:
    """A REST store URL taken apart: the dialect, the address (no key), the key."""

    spec: DialectSpec
    base_url: str
    api_key: str | None = field(repr=False)


def parse_rest_url(url: str, environ: Mapping[str, str] | None = None) -> RestUrl:
    """``url`` taken apart (module docstring).

    Raises:
        ConfigError: Not a REST dialect's scheme, no host, or an unknown query parameter; the
            message never holds the key.
    """
    environ = os.environ if environ is None else environ
    parts = urlsplit(url)
    scheme = parts.scheme.lower()
    name, _, transport = scheme.partition("+")
    spec = DIALECTS.get(name)
    host = parts.hostname
    shown = f"{scheme}://{host or ''}{f':{parts.port}' if _port(parts) else ''}{parts.path}"
    if spec is None or transport not in ("https", "http"):
        forms = ", ".join(s.form for s in DIALECTS.values())
        raise ConfigError(
            f"vector store: {shown!r} names no REST dialect; expected one of {forms} "
            "(or +http for a store on this machine)",
            code="unknown_store_scheme",
        )
    if not host:
        raise ConfigError(f"vector store: {shown!r} names no host; expected {spec.form}")
    if parts.path not in ("", "/"):
        raise ConfigError(
            f"vector store: {shown!r} has a path; expected {spec.form} (the port's name is the "
            "namespace)"
        )
    query = dict(parse_qsl(parts.query))
    unknown = sorted(set(query) - set(_QUERY_KEYS))
    if unknown:
        raise ConfigError(
            f"vector store: {shown!r}: unknown parameter(s) {unknown}; expected {_QUERY_KEYS}"
        )
    key = unquote(parts.password or parts.username or "") or None
    if key is None:
        key = environ.get(query.get("key_env", spec.key_env)) or None
    netloc = f"[{host}]" if ":" in host else host
    if _port(parts):
        netloc += f":{parts.port}"
    return RestUrl(spec, f"{transport}://{netloc}", key)


def _port(parts: Any) -> int | None:
    try:
        return parts.port  # type: ignore[no-any-return]
    except ValueError as err:
        raise ConfigError(f"vector store: the URL's port is not a number ({err})") from err


async def open_rest_store(url: str, *, dim: int, name: str) -> RestStore:
    """The REST store at ``url``, namespace ``name``, checked to hold ``dim``-vectors.

    Raises:
        ConfigError: A malformed URL, a bad ``dim``, or an index of another dimension.
        StoreUnavailable: The store cannot be reached.
        StorageError: The store refused the key or the request.
    """
    if isinstance(dim, bool) or not isinstance(dim, int) or dim < 1:
        raise ConfigError(f"vector store: dim must be an int ≥ 1, got {dim!r}")
    parsed = parse_rest_url(url)
    from evermind.vectorstore.rest.store import RestStore

    store = RestStore(parsed.spec.make(name, parsed.api_key), parsed.base_url, dim)
    return await store.open()
