"""Bearer tokens: the tokens file format and who a token belongs to (a leaf module).

The tokens file maps each token to a tenant and an access level, one per line::

    # token                              tenant   access
    4f9c2a...e1                          acme     write
    77b0d1...9a                          acme     read
    c3e8f0...42                          globex   write

Blank lines and ``#`` comments are ignored; ``access`` defaults to ``write``. The runtime
(``runtime/app.py``) and the MCP server (``mcp/http.py``) both read this format, through
:class:`evermind.auth.TokenTable`, so it lives here, below both. Standard library and
``evermind.errors`` only.
"""

from __future__ import annotations

import hashlib
import re
from dataclasses import dataclass, field
from typing import Literal

from evermind.errors import ConfigError

Access = Literal["read", "write"]
TENANT_PATTERN = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]{0,63}")
MIN_TOKEN_CHARS = 8
#: The tenant of a server started without a tokens file.
DEFAULT_TENANT = "default"


@dataclass(frozen=True)
class Principal:
    """Who is calling: the tenant every read and write is scoped to, and the access level.

    ``user`` tells the principals of one tenant apart (an opaque id of the token: see
    :func:`user_id`; "" without a tokens file); it takes no part in equality, so a tenant's
    tokens of one access level are one principal wherever tenants are compared.
    """

    tenant: str
    access: Access
    user: str = field(default="", compare=False)

    @property
    def can_write(self) -> bool:
        """Whether this caller may install, delete and store."""
        return self.access == "write"


def user_id(token: str) -> str:
    """The opaque id of a token's holder: 16 hex digits of a SHA-256 of the token (what a
    cache entry records as its owner; the token cannot be read back from it)."""
    return hashlib.sha256(b"evermind-user\x00" + token.encode("utf-8")).hexdigest()[:16]


def parse_tokens(text: str, source: str = "tokens file") -> list[tuple[str, Principal]]:
    """Parses the tokens file format (see the module docstring).

    Raises:
        ConfigError: A malformed line, a short token, a bad tenant name or a duplicate token.
    """
    entries: list[tuple[str, Principal]] = []
    seen: set[str] = set()
    for number, raw in enumerate(text.splitlines(), 1):
        line = raw.split("#", 1)[0].strip()
        if not line:
            continue
        parts = line.split()
        where = f"{source}:{number}"
        if len(parts) not in (2, 3):
            raise ConfigError(
                f"{where}: expected 'TOKEN TENANT [read|write]', got {len(parts)} fields"
            )
        token, tenant = parts[0], parts[1]
        access = parts[2] if len(parts) == 3 else "write"
        if len(token) < MIN_TOKEN_CHARS:
            raise ConfigError(
                f"{where}: token has {len(token)} characters, expected at least "
                f"{MIN_TOKEN_CHARS}; hint: python -c 'import secrets; print(secrets.token_hex())'"
            )
        if not TENANT_PATTERN.fullmatch(tenant):
            raise ConfigError(
                f"{where}: tenant {tenant!r} is not 1-64 characters of [A-Za-z0-9._-] "
                "starting with a letter or digit"
            )
        if access not in ("read", "write"):
            raise ConfigError(f"{where}: access must be 'read' or 'write', got {access!r}")
        if token in seen:
            raise ConfigError(f"{where}: this token appears twice; each token maps to one tenant")
        seen.add(token)
        level: Access = "write" if access == "write" else "read"
        entries.append((token, Principal(tenant, level, user_id(token))))
    if not entries:
        raise ConfigError(f"{source}: no tokens found; expected lines 'TOKEN TENANT [read|write]'")
    return entries


__all__ = [
    "DEFAULT_TENANT",
    "MIN_TOKEN_CHARS",
    "TENANT_PATTERN",
    "Access",
    "Principal",
    "parse_tokens",
    "user_id",
]
