"""Two checkouts' gateways behind one loopback upstream, requests interleaved (native-only).

``python -m benchmarks.gateway_ab --before /path/to/other/checkout [--embedder none]``: one
OpenAI upstream (:class:`tests.upstreams.OpenAIUpstream`, in a subprocess) and two ``evermind
serve --upstreams`` processes, one from ``--before``'s ``src`` and one from this checkout's,
both pointing at it. Each unique probe question goes straight to the upstream and through
both gateways, in an order that rotates per probe, so both gateways see the same load at the
same moments: on shared cores this gives a fair ratio where two runs of
:mod:`benchmarks.gateway` minutes apart do not. Reported: p50 and p99 of each, each gateway's
overhead as the median of its paired differences with the direct call, and the CPU time each
gateway process (and the upstream's) spent per probe (Linux: ``/proc``), which a busy machine
inflates far less than it inflates latencies. Every request is a
miss (unique questions); with ``--embedder terms|nano|package:PATH`` that is the miss path
with the cache. It measures; it asserts nothing about time.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import tempfile
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import httpx
from evals.cache_replay import probe_text

from benchmarks.gateway import (
    MODEL,
    ROOT,
    Upstream,
    _embedder_spec,
    _python_env,
    body,
    timed,
    write_config,
)


def _serve(root: Path, folder: Path, spec: str, upstream_url: str, env: dict[str, str]) -> Any:
    from benchmarks.serve import Server

    folder.mkdir(parents=True)
    config = write_config(folder, spec, upstream_url)
    own = dict(env)
    own["PYTHONPATH"] = os.pathsep.join([str(root / "src"), str(root)])
    return Server(
        folder / "data", extra=["--upstreams", str(config)], env=own, cwd=root, start_s=120
    )


def _cpu_s(pid: int) -> float | None:
    """User + system CPU seconds of process ``pid`` so far (None off Linux)."""
    try:
        with open(f"/proc/{pid}/stat", encoding="ascii") as stat:
            fields = stat.read().rsplit(")", 1)[1].split()
    except OSError:
        return None
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def _p99(values: list[float]) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, round(0.99 * (len(ordered) - 1)))]


def run_ab(before: Path, embedder: str = "none", probes: int = 300) -> dict[str, Any]:
    """The document: p50 of the direct call and of both gateways, and their paired overheads."""
    env = _python_env()
    upstream = Upstream(env)
    upstream_url = upstream.url
    servers: dict[str, Any] = {}
    try:
        with tempfile.TemporaryDirectory(prefix="evermind-bench-gateway-ab-") as tmp:
            folder = Path(tmp)
            spec = _embedder_spec(embedder, folder)
            for side, root in (("before", before.resolve()), ("after", ROOT)):
                servers[side] = _serve(root, folder / side, spec, upstream_url, env)
            urls = {"direct": upstream_url, **{side: s.url for side, s in servers.items()}}
            samples: dict[str, list[float]] = {kind: [] for kind in urls}
            order = list(urls)
            with httpx.Client(timeout=60) as client:

                def send(kind: str, text: str) -> float:
                    model = MODEL if kind == "direct" else f"openai/{MODEL}"
                    return timed(client, urls[kind] + "/v1/chat/completions", body(text, model))[0]

                for i in range(10):  # connections, imports, the first stores
                    for kind in order:
                        send(kind, f"warm {i}")
                load = os.getloadavg()[0]
                pids = {"upstream": upstream.process.pid}
                pids.update({side: s.process.pid for side, s in servers.items()})
                cpu_before = {name: _cpu_s(pid) for name, pid in pids.items()}
                for i in range(probes):
                    text = probe_text(i)
                    for kind in order[i % 3 :] + order[: i % 3]:
                        samples[kind].append(send(kind, text))
                cpu_after = {name: _cpu_s(pid) for name, pid in pids.items()}
    finally:
        for server in servers.values():
            server.stop()
        upstream.stop()
    direct = samples["direct"]
    return {
        "bench": "gateway_ab",
        "embedder": embedder,
        "probes": probes,
        "before": str(before),
        "load_average": [round(load, 2), round(os.getloadavg()[0], 2)],
        "p50_ms": {kind: 1000 * statistics.median(v) for kind, v in samples.items()},
        "p99_ms": {kind: 1000 * _p99(v) for kind, v in samples.items()},
        "overhead_p50_ms": {
            side: 1000
            * statistics.median(b - a for a, b in zip(direct, samples[side], strict=True))
            for side in ("before", "after")
        },
        # The upstream serves three calls per probe (direct and through each gateway).
        "cpu_ms_per_probe": {
            name: None if a is None or b is None else 1000 * (b - a) / probes
            for name, a in cpu_before.items()
            for b in [cpu_after[name]]
        },
    }


def main(argv: Sequence[str] | None = None) -> int:
    """``python -m benchmarks.gateway_ab --before DIR [--embedder E] [--probes N]``."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--before", type=Path, required=True, help="the other checkout's root")
    parser.add_argument("--embedder", default="none", help="none, terms, nano or package:PATH")
    parser.add_argument("--probes", type=int, default=300)
    args = parser.parse_args(argv)
    if not (args.before / "src" / "evermind").is_dir():
        parser.error(f"--before {args.before}: expected a checkout with src/evermind")
    doc = run_ab(args.before, args.embedder, args.probes)
    print(json.dumps(doc, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
