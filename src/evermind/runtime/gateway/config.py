"""The gateway's configuration: upstreams, their keys, and the cache policy (native-only).

``evermind serve --upstreams FILE`` reads one TOML (``.toml``) or JSON file::

    [cache]
    embedder = "terms"          # "terms" (model-free), "package:PATH" (an .evermind
                                # package, e.g. a nano SSM embedder) or "none" (no cache)
    l2 = true                   # also the runtime's shared SQLite L2
    capacity = 2048             # L1 entries
    ttl = 86400                 # seconds (default: no expiry)
    default_temperature = false # cache temperature-less requests
    tool_results = false        # cache requests carrying tool results
    tools = false               # cache requests offering tools
    scope = "tenant"            # who is served an entry: "tenant" (any of its tokens),
                                # "user" (the token that stored it) or "group" (the
                                # tenants of its [cache.shared] group; the default when
                                # that table is present)
    [cache.ttls]                # per cache namespace
    team = 600
    [cache.shared]              # tenants sharing one cache namespace
    alpha = "team"
    bravo = "team"

    [metrics]
    tenant_names = false        # /metrics labels tenants by a hash unless true

    [upstreams.anthropic]       # model "anthropic/<name>"
    protocol = "anthropic"      # or "openai" (any OpenAI-compatible server), "vertex" (Gemini):
                                # a protocol of evermind.bridges.protocols (default: the
                                # upstream's name)
    base_url = "https://api.anthropic.com"
    api_key = "env:ANTHROPIC_API_KEY"   # a literal, or env:VAR (read at start-up)
    models = ["claude-sonnet-4-5"]      # allowed models (default: any)
    tenants = ["alpha"]                 # allowed tenants (default: any)
    timeout = 60                        # seconds, per call and per streamed chunk
    max_retries = 2
    max_answer_chars = 1000000          # text + tool arguments of one answer (502 beyond)
    default_max_tokens = 8192           # sent only where this upstream's protocol requires
                                        # max_tokens and the client's (an OpenAI client)
                                        # sent none; a same-protocol request is never given one
    [upstreams.anthropic.tenant_keys]   # per-tenant keys (else api_key)
    alpha = "env:ALPHA_ANTHROPIC_KEY"

    [default_upstreams]         # where a bare model id ("claude-sonnet-4-5") goes, per
    anthropic = "anthropic"     # client route: /v1/messages; default: the upstream named
    openai = "openai"           # like the protocol, if any; /v1/chat/completions

    [auto]                      # model "evermind/auto": the router (see runtime/gateway/auto.py)
    local = "evermind/notes:1.0.0"
    frontier = "anthropic/claude-sonnet-4-5"

Keys are held here, server-side, and never sent to or accepted from clients; their
``repr`` is hidden.
"""

from __future__ import annotations

import dataclasses
import json
import os
import tomllib
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from evermind.agent.router import RouterConfig
from evermind.bridges import protocols
from evermind.bridges.answers import MAX_ANSWER_CHARS
from evermind.bridges.caching import CachePolicy
from evermind.cache.verified import DEFAULT_MAX_ERROR, parse_max_error
from evermind.errors import ConfigError

#: Upstream names: what precedes ``/`` in a model id (``evermind`` is the local models').
RESERVED = ("evermind",)


#: The model id the router answers to.
AUTO_MODEL = "evermind/auto"
#: ``max_tokens`` for an OpenAI client's request without one to a Messages API upstream.
DEFAULT_TRANSLATED_MAX_TOKENS = 8192
#: The client routes a bare model id may arrive on: /v1/messages and /v1/chat/completions.
CLIENT_PROTOCOLS = ("anthropic", "openai")
_ROUTER_FIELDS = ("max_surprise", "max_local_prompt_tokens", "local_context_tokens")
_ROUTER_FLAGS = ("use_confidence", "use_task_patterns")


#: The default share of lookups checked against the upstream.
DEFAULT_VERIFY_SAMPLE = 0.05


@dataclass(frozen=True)
class AutoConfig:
    """The ``[auto]`` table (see the module docstring)."""

    local: str
    frontier: str
    router: RouterConfig = field(default_factory=RouterConfig)
    budget_usd: float | None = None
    budgets: Mapping[str, float] = field(default_factory=dict)
    distill_tenants: frozenset[str] = frozenset()
    distill_all: bool = False
    distill_path: Path | None = None

    @property
    def distills(self) -> bool:
        return self.distill_all or bool(self.distill_tenants)

    @classmethod
    def parse(cls, raw: Any, where: str, upstreams: Mapping[str, Any]) -> AutoConfig:
        """Builds it from the parsed table; ``upstreams``: the file's upstream names.

        Raises:
            ConfigError: A missing or unknown field, a bad value, or a frontier model whose
                upstream the file does not define.
        """
        if not isinstance(raw, dict):
            raise ConfigError(f"{where}: expected a table, got {type(raw).__name__}")
        allowed = {"local", "frontier", "budget_usd", "budgets", "distill"}
        allowed |= {*_ROUTER_FIELDS, *_ROUTER_FLAGS}
        unknown = sorted(set(raw) - allowed)
        if unknown:
            raise ConfigError(
                f"{where}: unknown field(s) {unknown}; expected some of {sorted(allowed)}"
            )
        for name in ("local", "frontier"):
            if not isinstance(raw.get(name), str) or not raw[name]:
                raise ConfigError(
                    f"{where}: {name} must be a model id string, got {raw.get(name)!r}"
                )
        local, frontier = str(raw["local"]), str(raw["frontier"])
        prefix, slash, name = frontier.partition("/")
        if not slash or not name or prefix not in upstreams:
            raise ConfigError(
                f"{where}: frontier must be <upstream>/<model> with an upstream of this file "
                f"({sorted(upstreams)}), got {frontier!r}"
            )
        if local == AUTO_MODEL or local.partition("/")[0] in upstreams:
            raise ConfigError(
                f"{where}: local must name an installed Evermind model, got {local!r}"
            )
        options: dict[str, Any] = {}
        for key in _ROUTER_FIELDS:
            if key in raw:
                value = raw[key]
                whole = key != "max_surprise"
                if isinstance(value, bool) or not isinstance(value, int if whole else int | float):
                    kind = "an integer" if whole else "a number"
                    raise ConfigError(f"{where}: {key} must be {kind}, got {value!r}")
                options[key] = value
        for key in _ROUTER_FLAGS:
            if key in raw:
                if not isinstance(raw[key], bool):
                    raise ConfigError(f"{where}: {key} must be true or false, got {raw[key]!r}")
                options[key] = raw[key]
        try:
            router = RouterConfig(**options)
        except (TypeError, ConfigError) as err:
            raise ConfigError(f"{where}: {err}") from err
        budget = _usd(raw.get("budget_usd"), f"{where}: budget_usd")
        budgets_raw = raw.get("budgets", {})
        if not isinstance(budgets_raw, dict):
            raise ConfigError(f"{where}: budgets must be a table of tenant = USD")
        budgets = {str(k): _usd(v, f"{where}: budgets.{k}") or 0.0 for k, v in budgets_raw.items()}
        distill = raw.get("distill", {})
        if not isinstance(distill, dict) or set(distill) - {"tenants", "all", "path"}:
            raise ConfigError(f"{where}: distill must be a table with tenants, all and/or path")
        tenants = distill.get("tenants", [])
        if not isinstance(tenants, list) or not all(isinstance(t, str) for t in tenants):
            raise ConfigError(f"{where}: distill.tenants must be a list of tenant names")
        path = distill.get("path")
        return cls(
            local=local,
            frontier=frontier,
            router=router,
            budget_usd=budget,
            budgets=budgets,
            distill_tenants=frozenset(tenants),
            distill_all=bool(distill.get("all", False)),
            distill_path=None if path is None else Path(str(path)),
        )


def _usd(value: Any, what: str) -> float | None:
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, int | float) or not value >= 0:
        raise ConfigError(f"{what} must be a number of dollars >= 0, got {value!r}")
    return float(value)


@dataclass(frozen=True)
class UpstreamConfig:
    """One upstream language-model server.

    Attributes:
        name: Model ids ``<name>/<model>`` go to it.
        protocol: A name in :mod:`evermind.bridges.protocols`: ``anthropic`` (Messages
            API), ``openai`` (Chat Completions), ``vertex`` (Gemini ``generateContent``) or
            any other registered one.
        base_url: Its root URL (None: the provider's public API).
        api_key: The key for tenants without their own (empty: those tenants are refused).
        tenant_keys: Per-tenant keys.
        models: Allowed model names (empty: any).
        tenants: Tenants allowed to use it (empty: any).
        timeout: Seconds a call (or a streamed chunk) may take before the client gets 504.
        max_retries: Retries of the SDK on 429/5xx.
        max_answer_chars: Characters of text and tool arguments one answer may hold; a
            longer one is refused (``upstream_too_large``, 502) before it is all read, and
            never cached.
        default_max_tokens: ``max_tokens`` sent when the client's request has none and this
            upstream's protocol requires one (an OpenAI client of a Messages API upstream,
            which must be sent some value); a request in the upstream's own protocol is
            never given one.
    """

    name: str
    protocol: str
    base_url: str | None = None
    api_key: str = field(default="", repr=False)
    tenant_keys: Mapping[str, str] = field(default_factory=dict, repr=False)
    models: tuple[str, ...] = ()
    tenants: tuple[str, ...] = ()
    timeout: float = 60.0
    max_retries: int = 2
    max_answer_chars: int = MAX_ANSWER_CHARS
    default_max_tokens: int = DEFAULT_TRANSLATED_MAX_TOKENS

    def key_for(self, tenant: str) -> str:
        """The key ``tenant`` calls this upstream with ('' when it has none)."""
        return self.tenant_keys.get(tenant, self.api_key)

    @property
    def secrets(self) -> tuple[str, ...]:
        """Every key this upstream holds (scrubbed from any message a client could see)."""
        return tuple(k for k in (self.api_key, *self.tenant_keys.values()) if k)


@dataclass(frozen=True)
class GatewayConfig:
    """Everything the gateway needs: upstreams, the cache policy and embedder, labels.

    Attributes:
        upstreams: By name.
        policy: What is cacheable; see :class:`~evermind.bridges.caching.CachePolicy`.
        embedder: ``terms``, ``package:PATH``, ``teacher:minilm`` or ``none`` (no cache).
        l2: Whether the runtime's shared L2 backs the in-process L1.
        capacity: L1 entries.
        tenant_names: Whether ``/metrics`` labels tenants by name (else by a short hash).
        auto: The ``[auto]`` table: what ``evermind/auto`` routes between (None: no router).
        max_error: δ, the share of cacheable lookups the operator accepts being answered
            wrongly (``[cache] max_error``, ``--cache-max-error``): the verified decision of
            :mod:`evermind.cache.verified`. None (``max_error = "off"``): the rule-based one.
        verify_sample: The share of lookups checked against the upstream (``[cache]
            verify_sample``): misses are checked for free, sampled hits cost one call.
        verify_until_bounded: Check every would-be hit that is not an exact repeat until the
            gateway's own checks bound the error of serving one unchecked (``[cache]
            verify_until_bounded``, default true; see
            :class:`~evermind.cache.verified.Verification`).
        default_upstreams: By client protocol (``anthropic``: ``/v1/messages``, ``openai``:
            ``/v1/chat/completions``), the upstream a bare model id (no ``<upstream>/``
            prefix) goes to.
    """

    upstreams: Mapping[str, UpstreamConfig]
    policy: CachePolicy = field(default_factory=CachePolicy)
    embedder: str = "terms"
    l2: bool = True
    capacity: int = 2048
    tenant_names: bool = False
    auto: AutoConfig | None = None
    max_error: float | None = DEFAULT_MAX_ERROR
    verify_sample: float = DEFAULT_VERIFY_SAMPLE
    verify_until_bounded: bool = True
    default_upstreams: Mapping[str, str] = field(default_factory=dict)

    @property
    def secrets(self) -> tuple[str, ...]:
        """Every key of every upstream."""
        return tuple(s for u in self.upstreams.values() for s in u.secrets)

    def scoped(self, scope: str | None) -> GatewayConfig:
        """This configuration with the cache's scope set to ``scope`` (None: unchanged): what
        ``evermind serve --cache-scope`` does to the file's ``[cache] scope``.

        Raises:
            ConfigError: Not a scope, or a scope the file's ``[cache.shared]`` contradicts.
        """
        if scope is None:
            return self
        try:
            policy = dataclasses.replace(self.policy, scope=scope)
        except ConfigError as err:
            raise ConfigError(f"--cache-scope: {err}") from err
        return dataclasses.replace(self, policy=policy)

    @classmethod
    def load(cls, path: Path, environ: Mapping[str, str] | None = None) -> GatewayConfig:
        """Reads a ``.toml`` or ``.json`` file (see the module docstring).

        Raises:
            ConfigError: Unreadable or malformed, an unknown field, or an ``env:`` key whose
                variable is not set.
        """
        path = Path(path)
        try:
            text = path.read_text(encoding="utf-8")
            raw = json.loads(text) if path.suffix == ".json" else tomllib.loads(text)
        except (OSError, ValueError) as err:
            raise ConfigError(
                f"upstreams file {str(path)!r}: cannot read it: {err}; hint: a TOML (.toml) "
                "or JSON (.json) file, see docs/gateway.md"
            ) from err
        return cls.parse(raw, str(path), os.environ if environ is None else environ)

    @classmethod
    def parse(cls, raw: Any, where: str, environ: Mapping[str, str]) -> GatewayConfig:
        """Builds the configuration from the parsed file."""
        _fields(raw, where, {"cache", "metrics", "upstreams", "auto", "default_upstreams"})
        cache = raw.get("cache", {})
        _fields(
            cache,
            f"{where}: [cache]",
            {"embedder", "l2", "capacity", "ttl", "ttls", "shared", "scope"}
            | {"max_error", "verify_sample", "verify_until_bounded"}
            | {"default_temperature", "tool_results", "tools"},
        )
        metrics = raw.get("metrics", {})
        _fields(metrics, f"{where}: [metrics]", {"tenant_names"})
        embedder = str(cache.get("embedder", "terms"))
        if embedder not in ("terms", "none", "teacher:minilm") and not embedder.startswith(
            "package:"
        ):
            raise ConfigError(
                f"{where}: [cache] embedder must be 'terms', 'none', 'teacher:minilm' or "
                f"'package:PATH', got {embedder!r}"
            )
        shared = {str(k): str(v) for k, v in dict(cache.get("shared", {})).items()}
        try:
            policy = CachePolicy(
                cache_default_temperature=bool(cache.get("default_temperature", False)),
                cache_tool_results=bool(cache.get("tool_results", False)),
                cache_tools=bool(cache.get("tools", False)),
                ttl=cache.get("ttl"),
                ttls=dict(cache.get("ttls", {})),
                shared=shared,
                scope=cache.get("scope", ""),
            )
        except ConfigError as err:
            raise ConfigError(f"{where}: [cache] {err}") from err
        capacity = cache.get("capacity", 2048)
        if isinstance(capacity, bool) or not isinstance(capacity, int) or capacity < 1:
            raise ConfigError(f"{where}: [cache] capacity must be an int >= 1, got {capacity!r}")
        max_error = parse_max_error(cache.get("max_error", DEFAULT_MAX_ERROR), f"{where}: [cache]")
        verify_sample = cache.get("verify_sample", DEFAULT_VERIFY_SAMPLE)
        if (
            isinstance(verify_sample, bool)
            or not isinstance(verify_sample, int | float)
            or not 0.0 <= verify_sample <= 1.0
        ):
            raise ConfigError(
                f"{where}: [cache] verify_sample must be a share in [0, 1], got {verify_sample!r}"
            )
        until_bounded = cache.get("verify_until_bounded", True)
        if not isinstance(until_bounded, bool):
            raise ConfigError(
                f"{where}: [cache] verify_until_bounded must be true or false, "
                f"got {until_bounded!r}"
            )
        upstreams = raw.get("upstreams", {})
        if not isinstance(upstreams, dict) or not upstreams:
            raise ConfigError(f"{where}: expected at least one [upstreams.NAME] table")
        parsed = {
            str(name): _upstream(str(name), spec, f"{where}: [upstreams.{name}]", environ)
            for name, spec in upstreams.items()
        }
        auto = raw.get("auto")
        return cls(
            default_upstreams=_defaults(raw.get("default_upstreams"), parsed, where),
            upstreams=parsed,
            auto=None if auto is None else AutoConfig.parse(auto, f"{where}: [auto]", parsed),
            policy=policy,
            embedder=embedder,
            l2=bool(cache.get("l2", True)),
            capacity=capacity,
            tenant_names=bool(metrics.get("tenant_names", False)),
            max_error=max_error,
            verify_sample=float(verify_sample),
            verify_until_bounded=until_bounded,
        )


def _defaults(table: Any, upstreams: Mapping[str, UpstreamConfig], where: str) -> dict[str, str]:
    """``[default_upstreams]``: client protocol -> upstream name; where the table is silent,
    the upstream named like the protocol (``anthropic``, ``openai``), when there is one."""
    where = f"{where}: [default_upstreams]"
    given = {} if table is None else table
    _fields(given, where, set(CLIENT_PROTOCOLS))
    chosen = {p: p for p in CLIENT_PROTOCOLS if p in upstreams}
    for protocol, name in given.items():
        if not isinstance(name, str) or name not in upstreams:
            raise ConfigError(
                f"{where} {protocol}: {name!r} is not an upstream of this file; expected one "
                f"of {sorted(upstreams)}"
            )
        chosen[protocol] = name
    return chosen


def _fields(table: Any, where: str, allowed: set[str]) -> None:
    if not isinstance(table, dict):
        raise ConfigError(f"{where}: expected a table, got {type(table).__name__}")
    unknown = sorted(set(table) - allowed)
    if unknown:
        raise ConfigError(
            f"{where}: unknown field(s) {unknown}; expected some of {sorted(allowed)}"
        )


def _secret(value: Any, where: str, environ: Mapping[str, str]) -> str:
    """A literal key, or ``env:VAR``'s value (the error names the variable, never a value)."""
    if not isinstance(value, str):
        raise ConfigError(f"{where}: expected a string (a key or env:VAR)")
    if not value.startswith("env:"):
        return value
    variable = value[4:]
    if variable not in environ:
        raise ConfigError(f"{where}: environment variable {variable!r} is not set")
    return environ[variable]


def _upstream(name: str, spec: Any, where: str, environ: Mapping[str, str]) -> UpstreamConfig:
    allowed = {"protocol", "base_url", "api_key", "tenant_keys", "models", "tenants"}
    _fields(
        spec, where, allowed | {"timeout", "max_retries", "max_answer_chars", "default_max_tokens"}
    )
    if name in RESERVED or "/" in name or not name:
        raise ConfigError(f"{where}: the name {name!r} is reserved or not a single word")
    protocol = protocols.lookup(spec.get("protocol", name), where).name
    base_url = spec.get("base_url")
    if base_url is not None and not str(base_url).startswith(("http://", "https://")):
        raise ConfigError(f"{where}: base_url must be an http(s) URL, got {base_url!r}")
    tenant_keys = spec.get("tenant_keys", {})
    if not isinstance(tenant_keys, dict):
        raise ConfigError(f"{where}: tenant_keys must be a table of tenant = key")
    timeout = spec.get("timeout", 60.0)
    retries = spec.get("max_retries", 2)
    if isinstance(timeout, bool) or not isinstance(timeout, int | float) or timeout <= 0:
        raise ConfigError(f"{where}: timeout must be seconds > 0, got {timeout!r}")
    if isinstance(retries, bool) or not isinstance(retries, int) or retries < 0:
        raise ConfigError(f"{where}: max_retries must be an int >= 0, got {retries!r}")
    cap = spec.get("max_answer_chars", MAX_ANSWER_CHARS)
    if isinstance(cap, bool) or not isinstance(cap, int) or cap < 1:
        raise ConfigError(f"{where}: max_answer_chars must be an int >= 1, got {cap!r}")
    default_max = spec.get("default_max_tokens", DEFAULT_TRANSLATED_MAX_TOKENS)
    if isinstance(default_max, bool) or not isinstance(default_max, int) or default_max < 1:
        raise ConfigError(f"{where}: default_max_tokens must be an int >= 1, got {default_max!r}")
    return UpstreamConfig(
        name=name,
        default_max_tokens=default_max,
        protocol=protocol,
        base_url=None if base_url is None else str(base_url),
        api_key=_secret(spec.get("api_key", ""), f"{where} api_key", environ),
        tenant_keys={
            str(t): _secret(k, f"{where} tenant_keys.{t}", environ) for t, k in tenant_keys.items()
        },
        models=tuple(str(m) for m in spec.get("models", ())),
        tenants=tuple(str(t) for t in spec.get("tenants", ())),
        timeout=float(timeout),
        max_retries=retries,
        max_answer_chars=cap,
    )
