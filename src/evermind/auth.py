"""Who may call: bearer tokens, per-key rate limits, the failed-authentication limiter.

One implementation for both servers that take the tokens file (:mod:`evermind.tokens`): the
agent runtime (``evermind serve``, ``runtime/app.py``) and the MCP server over HTTP
(``evermind mcp --http``, ``mcp/http.py``). Each surface keeps its own HTTP answers (statuses,
headers, messages); what a token is worth and how fast a key may spend is decided here.

- :class:`TokenTable` looks a bearer token up in constant time: the presented token's
  SHA-256 is compared with every token's using ``hmac.compare_digest``, without stopping at
  the first match, so neither the time taken nor the token's length tells an attacker which
  tenant (if any) was close. Without a tokens file every caller is
  :data:`~evermind.tokens.DEFAULT_TENANT` with write access.
- :class:`RateLimiter` is a token bucket per key (a tenant's requests on both servers).
- :class:`FailedAuthLimiter` slows a client that keeps failing: failed authentications spend
  from a bucket of their own, and an empty bucket refuses before the token is even looked at.
  The bucket is the failed *credential's* (a hash of it), decided in
  :meth:`FailedAuthLimiter.key` and only there: a client repeating a wrong or revoked token
  is slowed, while a valid token is never refused, whoever else fails from the same address
  (a valid token spends nothing and owns its own bucket). Requests with no credential at all
  share their client address's bucket; the address is the socket's peer unless the server
  trusts a proxy's ``X-Forwarded-For`` (``evermind serve --trusted-proxy``). Guessing a token
  is not made slower this way: tokens must be long and random (``secrets.token_hex()``).

Standard library and ``evermind`` only.
"""

from __future__ import annotations

import hashlib
import hmac
import math
import time
from collections.abc import Callable
from pathlib import Path

from evermind.errors import AccessError, ConfigError
from evermind.tokens import DEFAULT_TENANT, Principal, parse_tokens

__all__ = [
    "AUTH_FAILURES_PER_S",
    "AUTH_FAILURE_BURST",
    "FailedAuthLimiter",
    "PermissionDenied",
    "RateLimited",
    "RateLimiter",
    "TokenTable",
    "Unauthenticated",
]

#: Failed authentications a client may make per second, sustained ...
AUTH_FAILURES_PER_S = 2.0
#: ... and at once.
AUTH_FAILURE_BURST = 20


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


def _digest(token: str) -> bytes:
    return hashlib.sha256(token.encode("utf-8")).digest()


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
    def from_file(cls, path: Path | str | None) -> TokenTable:
        """Reads a tokens file, or builds the no-auth table when ``path`` is None.

        Raises:
            ConfigError: The file is missing, unreadable or malformed.
        """
        if path is None:
            return cls(None)
        try:
            text = Path(path).read_text(encoding="utf-8")
        except OSError as err:
            raise ConfigError(
                f"tokens file {str(path)!r} cannot be read: {err.strerror or err}; hint: "
                "check the path and that this user may read it"
            ) from err
        return cls(parse_tokens(text, str(path)))

    @property
    def principals(self) -> tuple[Principal, ...]:
        """Every principal a caller can be, each once, in the file's order."""
        if not self.enabled:
            return (Principal(DEFAULT_TENANT, "write"),)
        return tuple(dict.fromkeys(who for _, who in self._digests))

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


class RateLimiter:
    """A token bucket per key: ``rate`` requests/s sustained, ``burst`` at once.

    Args:
        rate: Requests per second; 0 disables limiting.
        burst: Bucket size; 0 means twice the rate (at least 1).
        clock: Monotonic seconds (injectable for tests).

    Raises:
        ConfigError: ``rate`` is not a finite number >= 0, or ``burst`` not an int >= 0.
    """

    def __init__(
        self, rate: float, burst: int = 0, clock: Callable[[], float] = time.monotonic
    ) -> None:
        if isinstance(rate, bool) or not isinstance(rate, int | float) or not rate >= 0:
            raise ConfigError(f"rate limit: expected requests a second >= 0, got {rate!r}")
        if not math.isfinite(rate):
            raise ConfigError(f"rate limit: expected a finite rate, got {rate!r}")
        if isinstance(burst, bool) or not isinstance(burst, int) or burst < 0:
            raise ConfigError(f"rate limit: expected a burst (an int >= 0), got {burst!r}")
        self.rate = float(rate)
        self.burst = float(burst or max(1, int(2 * rate)))
        self._clock = clock
        self._buckets: dict[str, tuple[float, float]] = {}

    @classmethod
    def per_minute(cls, requests: int, clock: Callable[[], float] = time.monotonic) -> RateLimiter:
        """``requests`` a minute, in bursts of up to as many.

        Raises:
            ConfigError: ``requests`` is not a positive integer.
        """
        if isinstance(requests, bool) or not isinstance(requests, int) or requests < 1:
            raise ConfigError(f"rate limit: expected requests a minute >= 1, got {requests!r}")
        return cls(requests / 60.0, requests, clock)

    def _level(self, key: str, now: float) -> float:
        level, last = self._buckets.get(key, (self.burst, now))
        return min(self.burst, level + (now - last) * self.rate)

    def acquire(self, key: str) -> float:
        """Takes one request from ``key``'s bucket.

        Returns:
            0.0 when the request may proceed, else the seconds until one would be allowed
            (nothing was taken).
        """
        if self.rate <= 0:
            return 0.0
        now = self._clock()
        level = self._level(key, now)
        if level < 1.0:
            self._buckets[key] = (level, now)
            return (1.0 - level) / self.rate
        self._buckets[key] = (level - 1.0, now)
        self._prune(now)
        return 0.0

    def check(self, key: str) -> None:
        """Takes one request from ``key``'s bucket (a tenant's, on the runtime).

        Raises:
            RateLimited: The bucket is empty (``retry_after_s`` says for how long).
        """
        wait = self.acquire(key)
        if wait > 0:
            raise RateLimited(
                f"rate limit of {self.rate:g} requests/s (burst {self.burst:g}) exceeded for "
                f"this tenant; retry in {wait:.2f} s",
                max(1, round(wait + 0.5)),
            )

    def wait_s(self, key: str) -> float:
        """Seconds until ``key`` may spend again (0: now); spends nothing."""
        if self.rate <= 0 or key not in self._buckets:
            return 0.0
        level = self._level(key, self._clock())
        return 0.0 if level >= 1.0 else (1.0 - level) / self.rate

    def spend(self, key: str) -> None:
        """Takes one from ``key``'s bucket, never below empty, never raising."""
        if self.rate <= 0:
            return
        now = self._clock()
        self._buckets[key] = (max(0.0, self._level(key, now) - 1.0), now)
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


class FailedAuthLimiter:
    """Failed authentications spend from a bucket per failed credential (per client address
    for requests without one); an empty bucket refuses first.

    Args:
        limiter: The buckets (default: :data:`AUTH_FAILURES_PER_S` a second, bursts of
            :data:`AUTH_FAILURE_BURST`).
    """

    def __init__(self, limiter: RateLimiter | None = None) -> None:
        self.limiter = limiter or RateLimiter(AUTH_FAILURES_PER_S, AUTH_FAILURE_BURST)

    def key(self, client: str, authorization: str | None) -> str:
        """The bucket a failed authentication from ``client`` with ``authorization`` spends
        from (the one place that decides it): the presented credential's SHA-256 (scheme
        folded, token trimmed), or, with no credential, the client's address.

        Keying on the credential, not the address, means a valid token is never in the
        bucket that failures empty, so it is never refused for what others at its address
        (a NAT, a proxy, a shared host) got wrong.
        """
        if authorization and authorization.strip():
            scheme, _, token = authorization.strip().partition(" ")
            folded = f"{scheme.lower()} {token.strip()}"
            return "credential:" + hashlib.sha256(folded.encode("utf-8")).hexdigest()[:32]
        return f"client:{client}"

    def authenticate(self, table: TokenTable, authorization: str | None, client: str) -> Principal:
        """``table``'s principal for ``authorization``, unless ``client`` failed too often.

        Args:
            table: The tokens.
            authorization: The request's ``Authorization`` header (None: it had none).
            client: The client's address: the socket's peer, or the client a trusted proxy
                named.

        Raises:
            RateLimited: Too many failed authentications; nothing was looked up.
            Unauthenticated: ``table`` refused the header (counted as a failure).
        """
        key = self.key(client, authorization)
        wait = self.limiter.wait_s(key)
        if wait > 0:
            what = "with this token" if key.startswith("credential:") else f"from {client}"
            raise RateLimited(
                f"too many failed authentications {what}; retry in {wait:.1f} s; hint: check "
                "the token (a valid one is never refused here)",
                max(1, round(wait + 0.5)),
            )
        try:
            return table.authenticate(authorization)
        except Unauthenticated:
            self.limiter.spend(key)
            raise
