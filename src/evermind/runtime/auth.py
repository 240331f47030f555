"""Tenancy: bearer tokens, tenants, access levels, per-tenant rate limits (native-only).

The tokens file format and :class:`Principal` live in :mod:`evermind.tokens` (the MCP server
reads the same file). Tokens are compared in constant time (every
entry is compared, always, on sha256 digests of equal length), so response timing does not
reveal how much of a token matched.
"""

from __future__ import annotations

import hashlib
import hmac
import time
from collections.abc import Callable
from pathlib import Path

from evermind.errors import AccessError, ConfigError
from evermind.tokens import DEFAULT_TENANT, Principal, parse_tokens


class Unauthenticated(AccessError):
    """The request carries no bearer token, another scheme, or a token not in the file."""


class PermissionDenied(AccessError):
    """The caller's token is read-only and the request writes."""

    code = "read_only_token"


class RateLimited(AccessError):
    """The tenant's token bucket is empty.

    Attributes:
        retry_after_s: Whole seconds after which a retry will be admitted.
    """

    code = "rate_limited"

    def __init__(self, message: str, retry_after_s: int) -> None:
        super().__init__(message)
        self.retry_after_s = retry_after_s

    def __reduce__(self) -> tuple[type[RateLimited], tuple[str, int]]:
        return (type(self), (str(self), self.retry_after_s))


class TokenTable:
    """Looks up the principal of a bearer token in constant time.

    Args:
        entries: ``(token, principal)`` pairs; None means no authentication: every caller
            is :data:`DEFAULT_TENANT` with write access.
    """

    def __init__(self, entries: list[tuple[str, Principal]] | None) -> None:
        self.enabled = entries is not None
        self._digests = [(_digest(token), who) for token, who in entries or []]

    @classmethod
    def from_file(cls, path: Path | None) -> TokenTable:
        """Reads a tokens file, or builds the no-auth table when ``path`` is None.

        Raises:
            ConfigError: The file is missing, unreadable or malformed.
        """
        if path is None:
            return cls(None)
        try:
            text = Path(path).read_text(encoding="utf-8")
        except OSError as err:
            raise ConfigError(f"cannot read the tokens file {str(path)!r}: {err}") from err
        return cls(parse_tokens(text, str(path)))

    def authenticate(self, authorization: str | None) -> Principal:
        """The caller of a request with this ``Authorization`` header.

        Raises:
            Unauthenticated: The header is missing, not ``Bearer``, or the token is unknown.
        """
        if not self.enabled:
            return Principal(DEFAULT_TENANT, "write")
        if not authorization:
            raise Unauthenticated(
                "missing bearer token; expected an 'Authorization: Bearer <token>' header; "
                "hint: ask the server's operator for a token from its tokens file",
                code="missing_token",
            )
        scheme, _, token = authorization.partition(" ")
        if scheme.lower() != "bearer" or not token.strip():
            raise Unauthenticated(
                f"unsupported authorization scheme {scheme!r}; expected 'Bearer <token>'",
                code="invalid_authorization",
            )
        wanted = _digest(token.strip())
        found: Principal | None = None
        for digest, who in self._digests:  # no early exit: constant time in the table size
            if hmac.compare_digest(digest, wanted):
                found = who
        if found is None:
            raise Unauthenticated(
                "invalid bearer token; it is not in the server's tokens file; "
                "hint: check for a typo or an expired token",
                code="invalid_token",
            )
        return found


def _digest(token: str) -> bytes:
    return hashlib.sha256(token.encode("utf-8")).digest()


class RateLimiter:
    """A token bucket per tenant: ``rate`` requests/s sustained, ``burst`` at once.

    Args:
        rate: Requests per second; 0 disables limiting.
        burst: Bucket size; 0 means twice the rate (at least 1).
        clock: Monotonic seconds (injectable for tests).
    """

    def __init__(
        self, rate: float, burst: int = 0, clock: Callable[[], float] = time.monotonic
    ) -> None:
        self.rate = rate
        self.burst = float(burst or max(1, int(2 * rate)))
        self._clock = clock
        self._buckets: dict[str, tuple[float, float]] = {}

    def check(self, tenant: str) -> None:
        """Takes one request from ``tenant``'s bucket.

        Raises:
            RateLimited: The bucket is empty (``retry_after_s`` says for how long).
        """
        if self.rate <= 0:
            return
        now = self._clock()
        level, last = self._buckets.get(tenant, (self.burst, now))
        level = min(self.burst, level + (now - last) * self.rate)
        if level < 1.0:
            wait = (1.0 - level) / self.rate
            self._buckets[tenant] = (level, now)
            raise RateLimited(
                f"rate limit of {self.rate:g} requests/s (burst {self.burst:g}) exceeded for "
                f"this tenant; retry in {wait:.2f} s",
                max(1, round(wait + 0.5)),
            )
        self._buckets[tenant] = (level - 1.0, now)
        self._prune(now)

    def wait_s(self, key: str) -> float:
        """Seconds until ``key`` may spend again (0: now); spends nothing."""
        if self.rate <= 0 or key not in self._buckets:
            return 0.0
        level, last = self._buckets[key]
        level = min(self.burst, level + (self._clock() - last) * self.rate)
        return 0.0 if level >= 1.0 else (1.0 - level) / self.rate

    def spend(self, key: str) -> None:
        """Takes one from ``key``'s bucket, never below empty, never raising."""
        if self.rate <= 0:
            return
        now = self._clock()
        level, last = self._buckets.get(key, (self.burst, now))
        level = min(self.burst, level + (now - last) * self.rate)
        self._buckets[key] = (max(0.0, level - 1.0), now)
        self._prune(now)

    def _prune(self, now: float, keep: int = 10_000) -> None:
        """Forgets full buckets once many keys are held (a flood of keys costs nothing)."""
        if len(self._buckets) <= keep:
            return
        full = [
            key
            for key, (level, last) in self._buckets.items()
            if level + (now - last) * self.rate >= self.burst
        ]
        for key in full:
            del self._buckets[key]
