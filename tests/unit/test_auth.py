"""``evermind.auth``: the one token table and limiters behind the runtime and the MCP server.

The HTTP answers each surface builds from these (statuses, headers, messages) are checked over
real servers: ``tests/runtime/test_tenancy.py`` and ``test_hostile_inputs.py`` (the runtime),
``tests/runtime/test_mcp_server.py`` (``evermind mcp --http``).
"""

from __future__ import annotations

from pathlib import Path

import pytest

from evermind.auth import (
    AUTH_FAILURE_BURST,
    FailedAuthLimiter,
    RateLimited,
    RateLimiter,
    TokenTable,
    Unauthenticated,
)
from evermind.errors import ConfigError
from evermind.tokens import Principal


def test_tokens_file_is_read_into_principals(tmp_path: Path) -> None:
    good = tmp_path / "tokens.txt"
    good.write_text("# comment\n" + "x" * 16 + " acme\n" + "y" * 16 + " acme read\n")
    table = TokenTable.from_file(good)
    acme_write, acme_read = Principal("acme", "write"), Principal("acme", "read")
    assert table.enabled and table.principals == (acme_write, acme_read)
    assert table.authenticate("Bearer " + "y" * 16) == acme_read
    for label, content in {
        "short": "abc acme",
        "shared": "z" * 16 + " a\n" + "z" * 16 + " b",
        "empty": "# nothing",
        "access": "q" * 16 + " a admin",
    }.items():
        bad = tmp_path / f"{label}.txt"
        bad.write_text(content)
        with pytest.raises(ConfigError):
            TokenTable.from_file(bad)
    with pytest.raises(ConfigError, match=r"missing\.txt' cannot be read"):
        TokenTable.from_file(tmp_path / "missing.txt")
    opened = TokenTable.from_file(None)
    assert not opened.enabled and opened.principals == (Principal("default", "write"),)


def test_authenticate() -> None:
    table = TokenTable(
        [("abcdefgh-1", Principal("acme", "read")), ("b" * 20, Principal("b", "write"))]
    )
    assert table.authenticate("Bearer abcdefgh-1") == Principal("acme", "read")
    assert table.authenticate("bearer  abcdefgh-1 ") == Principal("acme", "read")
    assert table.authenticate("Bearer " + "b" * 20) == Principal("b", "write")
    for header, code in (
        (None, "missing_token"),
        ("", "missing_token"),
        ("Bearer", "invalid_authorization"),
        ("Basic abc", "invalid_authorization"),
        ("b" * 20, "invalid_authorization"),
        ("Bearer abcdefgh-2", "invalid_token"),
        ("Bearer abcdefgh-", "invalid_token"),
        ("Bearer " + "b" * 19, "invalid_token"),
    ):
        with pytest.raises(Unauthenticated) as refused:
            table.authenticate(header)
        assert refused.value.code == code, header
    assert TokenTable(None).authenticate(None) == Principal("default", "write")


def test_rate_limiter_refills_over_time() -> None:
    now = [0.0]
    limiter = RateLimiter(rate=2.0, burst=2, clock=lambda: now[0])
    limiter.check("a")
    limiter.check("a")
    with pytest.raises(RateLimited) as limited:
        limiter.check("a")
    assert limited.value.retry_after_s == 1
    limiter.check("b")  # other tenants have their own bucket
    now[0] = 0.5  # one token back at 2/s
    limiter.check("a")
    with pytest.raises(RateLimited):
        limiter.check("a")
    RateLimiter(rate=0).check("a")  # 0 disables
    for rate, burst in ((-1.0, 0), (float("nan"), 0), (float("inf"), 0), (1.0, -2), (True, 0)):
        with pytest.raises(ConfigError, match="rate limit"):
            RateLimiter(rate, burst)


def test_rate_limiter_per_minute() -> None:
    now = [0.0]
    limiter = RateLimiter.per_minute(2, clock=lambda: now[0])
    assert limiter.acquire("alice") == 0.0 and limiter.acquire("alice") == 0.0
    wait = limiter.acquire("alice")
    assert wait == pytest.approx(30.0)  # 2 a minute: one more after 30 s
    assert limiter.acquire("bob") == 0.0
    now[0] = 30.0
    assert limiter.acquire("alice") == 0.0
    for bad in (0, -5, 1.5, True):
        with pytest.raises(ConfigError, match="requests a minute"):
            RateLimiter.per_minute(bad)  # type: ignore[arg-type]


def test_failed_authentications_are_limited_per_failed_credential() -> None:
    now = [0.0]
    failures = FailedAuthLimiter(RateLimiter(2.0, AUTH_FAILURE_BURST, clock=lambda: now[0]))
    table = TokenTable([("abcdefgh-1", Principal("acme", "write"))])
    for _ in range(AUTH_FAILURE_BURST):
        with pytest.raises(Unauthenticated):
            failures.authenticate(table, "Bearer wrong-token", "10.0.0.7")
    # That credential's bucket is empty: repeating it is refused, unlooked-at ...
    with pytest.raises(RateLimited, match="too many failed authentications with this token"):
        failures.authenticate(table, "Bearer wrong-token", "10.0.0.7")
    with pytest.raises(RateLimited):  # ... however its scheme is spelled, from anywhere
        failures.authenticate(table, "bearer  wrong-token ", "10.0.0.9")
    # ... but a valid token from the same address never is, nor another wrong token.
    for _ in range(3 * AUTH_FAILURE_BURST):
        assert failures.authenticate(table, "Bearer abcdefgh-1", "10.0.0.7").tenant == "acme"
    with pytest.raises(Unauthenticated):
        failures.authenticate(table, "Bearer another-wrong", "10.0.0.7")
    now[0] = 0.5  # one failure's worth back at 2/s
    with pytest.raises(Unauthenticated):
        failures.authenticate(table, "Bearer wrong-token", "10.0.0.7")
    # Requests with no credential share their address's bucket.
    for _ in range(AUTH_FAILURE_BURST):
        with pytest.raises(Unauthenticated):
            failures.authenticate(table, None, "10.0.0.7")
    with pytest.raises(RateLimited, match=r"from 10\.0\.0\.7"):
        failures.authenticate(table, None, "10.0.0.7")
    with pytest.raises(Unauthenticated):
        failures.authenticate(table, None, "10.0.0.8")
    assert failures.key("10.0.0.7", None) == "client:10.0.0.7"
    assert failures.key("10.0.0.7", "Bearer x") == failures.key("10.0.0.8", "BEARER x ")
    assert "wrong-token" not in failures.key("10.0.0.7", "Bearer wrong-token")  # a hash only
