"""Counters and latency histograms of the runtime, rendered as Prometheus text (native-only).

Labels never carry tenant or model names (``/metrics`` needs no token); per-model usage is
in ``GET /v1/models/{id}``, which is tenant-scoped.
"""

from __future__ import annotations

import threading
from collections import defaultdict
from collections.abc import Callable

#: Upper bounds of the latency histogram, in seconds.
BUCKETS = (0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0)


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
            gauges = dict(self.gauges)
        for name, read in sorted(gauges.items()):
            out += [f"# TYPE {name} gauge", f"{name} {read():g}"]
        return "\n".join(out) + "\n"


def _esc(value: str) -> str:
    return value.replace("\\", "\\\\").replace('"', '\\"').replace("\n", "\\n")
