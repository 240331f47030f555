"""Counters and latency histograms of the runtime, rendered as Prometheus text (native-only).

Labels never carry model names (``/metrics`` needs no token); per-model usage is in
``GET /v1/models/{id}``, which is tenant-scoped. The gateway's counters are per tenant and
upstream: the tenant label is a short hash of the name unless the upstreams file sets
``[metrics] tenant_names = true`` (see docs/gateway.md).
"""

from __future__ import annotations

import threading
from collections import defaultdict
from collections.abc import Callable
from dataclasses import dataclass, field

from evermind.bridges.base import Usage

#: Upper bounds of the latency histogram, in seconds.
BUCKETS = (0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0)


#: The gateway's cache outcomes (the ``x-evermind-cache`` header's values).
CACHE_STATUSES = ("hit-l1", "hit-l2", "miss", "bypass")
TOKEN_KINDS = ("input", "output", "cache_read", "cache_write")


@dataclass
class GatewayCounters:
    """What one tenant spent and saved on one upstream."""

    requests: dict[str, int] = field(default_factory=lambda: dict.fromkeys(CACHE_STATUSES, 0))
    errors: dict[str, int] = field(default_factory=dict)
    usage: Usage = field(default_factory=Usage)
    cost_usd: float = 0.0
    saved: Usage = field(default_factory=Usage)
    saved_usd: float = 0.0

    @property
    def hit_rate(self) -> float:
        """Hits over served calls (0.0 before the first)."""
        served = sum(self.requests.values())
        hits = self.requests["hit-l1"] + self.requests["hit-l2"]
        return hits / served if served else 0.0


def _kinds(usage: Usage) -> tuple[int, int, int, int]:
    return (
        usage.input_tokens,
        usage.output_tokens,
        usage.cache_read_tokens,
        usage.cache_write_tokens,
    )


class Metrics:
    """The runtime's counters; every method is thread-safe."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self.requests: dict[tuple[str, str, int], int] = defaultdict(int)
        self._latency_counts: dict[str, list[int]] = {}
        self._latency_sum: dict[str, float] = defaultdict(float)
        self.tokens: dict[str, int] = defaultdict(int)
        self.cache: dict[str, int] = defaultdict(int)
        self.gauges: dict[str, Callable[[], float]] = {}
        #: (tenant label, upstream) -> the gateway's counters.
        self.gateway: dict[tuple[str, str], GatewayCounters] = defaultdict(GatewayCounters)
        #: (tenant label, target, reason) -> decisions of the ``evermind/auto`` router.
        self.routes: dict[tuple[str, str, str], int] = defaultdict(int)

    def observe_request(self, route: str, method: str, status: int, seconds: float) -> None:
        """Counts one finished request and its latency."""
        with self._lock:
            self.requests[(route, method, status)] += 1
            counts = self._latency_counts.setdefault(route, [0] * (len(BUCKETS) + 1))
            for i, bound in enumerate(BUCKETS):
                if seconds <= bound:
                    counts[i] += 1
            counts[-1] += 1  # +Inf, also the total count
            self._latency_sum[route] += seconds

    def add_tokens(self, kind: str, count: int) -> None:
        """Adds ``count`` tokens of ``kind`` (``prompt``, ``completion``, ``embedding``)."""
        with self._lock:
            self.tokens[kind] += count

    def cache_event(self, event: str) -> None:
        """Counts a semantic-cache ``hit``, ``miss``, ``guard_refused`` or ``store``."""
        with self._lock:
            self.cache[event] += 1

    def gateway_call(
        self,
        tenant: str,
        upstream: str,
        status: str,
        usage: Usage,
        cost_usd: float,
        saved: Usage | None,
        saved_usd: float,
    ) -> None:
        """Counts one call the gateway served (``status``: one of :data:`CACHE_STATUSES`)."""
        with self._lock:
            counters = self.gateway[(tenant, upstream)]
            counters.requests[status] = counters.requests.get(status, 0) + 1
            counters.usage = counters.usage + usage
            counters.cost_usd += cost_usd
            if saved is not None:
                counters.saved = counters.saved + saved
            counters.saved_usd += saved_usd

    def router_decision(self, tenant: str, target: str, reason: str) -> None:
        """Counts one decision of the ``evermind/auto`` router."""
        with self._lock:
            self.routes[(tenant, target, reason)] += 1

    def gateway_error(self, tenant: str, upstream: str, code: str) -> None:
        """Counts one failed gateway call by its error code."""
        with self._lock:
            errors = self.gateway[(tenant, upstream)].errors
            errors[code] = errors.get(code, 0) + 1

    def _render_gateway(self) -> list[str]:
        out: list[str] = []
        rows = sorted(self.gateway.items())
        families = [
            ("evermind_gateway_requests_total", "counter", "Gateway calls by cache outcome."),
            ("evermind_gateway_errors_total", "counter", "Failed gateway calls by error code."),
            ("evermind_gateway_tokens_total", "counter", "Tokens paid upstream, by kind."),
            ("evermind_gateway_cost_usd_total", "counter", "Dollars paid upstream (priced)."),
            ("evermind_gateway_saved_tokens_total", "counter", "Tokens cache hits saved."),
            ("evermind_gateway_saved_usd_total", "counter", "Dollars cache hits saved."),
            ("evermind_gateway_cache_hit_ratio", "gauge", "Cache hits over served calls."),
        ]
        for name, kind, help_text in families:
            out += [f"# HELP {name} {help_text}", f"# TYPE {name} {kind}"]
            for (tenant, upstream), c in rows:
                label = f'tenant="{_esc(tenant)}",upstream="{_esc(upstream)}"'
                if name == "evermind_gateway_requests_total":
                    out += [f'{name}{{{label},cache="{s}"}} {n}' for s, n in c.requests.items()]
                elif name == "evermind_gateway_errors_total":
                    out += [f'{name}{{{label},code="{_esc(e)}"}} {n}' for e, n in c.errors.items()]
                elif name in (
                    "evermind_gateway_tokens_total",
                    "evermind_gateway_saved_tokens_total",
                ):
                    usage = c.usage if name == "evermind_gateway_tokens_total" else c.saved
                    out += [
                        f'{name}{{{label},kind="{k}"}} {n}'
                        for k, n in zip(TOKEN_KINDS, _kinds(usage), strict=True)
                    ]
                elif name == "evermind_gateway_cost_usd_total":
                    out.append(f"{name}{{{label}}} {c.cost_usd:.6f}")
                elif name == "evermind_gateway_saved_usd_total":
                    out.append(f"{name}{{{label}}} {c.saved_usd:.6f}")
                else:
                    out.append(f"{name}{{{label}}} {c.hit_rate:.6f}")
        return out

    def render(self) -> str:
        """The Prometheus text exposition of every metric."""
        out: list[str] = []
        with self._lock:
            out += [
                "# HELP evermind_requests_total HTTP requests by route, method and status.",
                "# TYPE evermind_requests_total counter",
            ]
            for (route, method, status), value in sorted(self.requests.items()):
                out.append(
                    f'evermind_requests_total{{route="{_esc(route)}",method="{method}",'
                    f'status="{status}"}} {value}'
                )
            out += [
                "# HELP evermind_request_duration_seconds Time to the last byte of a response.",
                "# TYPE evermind_request_duration_seconds histogram",
            ]
            for route, counts in sorted(self._latency_counts.items()):
                label = f'route="{_esc(route)}"'
                for bound, count in zip(BUCKETS, counts, strict=False):
                    out.append(
                        f'evermind_request_duration_seconds_bucket{{{label},le="{bound}"}} {count}'
                    )
                out.append(
                    f'evermind_request_duration_seconds_bucket{{{label},le="+Inf"}} {counts[-1]}'
                )
                out.append(
                    f"evermind_request_duration_seconds_sum{{{label}}} "
                    f"{self._latency_sum[route]:.6f}"
                )
                out.append(f"evermind_request_duration_seconds_count{{{label}}} {counts[-1]}")
            out += [
                "# HELP evermind_tokens_total Tokens processed, by kind.",
                "# TYPE evermind_tokens_total counter",
            ]
            for kind in ("prompt", "completion", "embedding"):
                out.append(f'evermind_tokens_total{{kind="{kind}"}} {self.tokens[kind]}')
            out += [
                "# HELP evermind_semantic_cache_total Semantic-cache lookups and stores.",
                "# TYPE evermind_semantic_cache_total counter",
            ]
            for event in ("hit", "miss", "guard_refused", "store"):
                out.append(f'evermind_semantic_cache_total{{event="{event}"}} {self.cache[event]}')
            out += self._render_gateway()
            out += [
                "# HELP evermind_router_decisions_total evermind/auto decisions, by target "
                "and reason.",
                "# TYPE evermind_router_decisions_total counter",
            ]
            for (tenant, target, reason), n in sorted(self.routes.items()):
                out.append(
                    f'evermind_router_decisions_total{{tenant="{_esc(tenant)}",'
                    f'target="{_esc(target)}",reason="{_esc(reason)}"}} {n}'
                )
            gauges = dict(self.gauges)
        for name, read in sorted(gauges.items()):
            out += [f"# TYPE {name} gauge", f"{name} {read():g}"]
        return "\n".join(out) + "\n"


def _esc(value: str) -> str:
    return value.replace("\\", "\\\\").replace('"', '\\"').replace("\n", "\\n")
