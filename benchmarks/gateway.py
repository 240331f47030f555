"""``evermind bench gateway``: the caching gateway replayed on loopback (native-only).

For each cache configuration (``none``: no cache, the gateway as a plain proxy; ``terms``:
the model-free :class:`~evermind.bridges.caching.TermEmbedder`; ``nano``: a nano Evermind
SSM package as the embedder, d_model 128, 4 layers, untrained: its latency is a trained
one's, its hit rate is not; ``package:PATH``: any trained package, e.g. the one ``make demo``
writes, whose embedding head was distilled), it starts a fresh loopback OpenAI upstream
(:class:`tests.upstreams.OpenAIUpstream`, in a subprocess) and a fresh ``evermind serve
--upstreams`` (a subprocess), then:

1. **Overhead on a miss**: ``--probes`` unique questions, each sent once straight to the
   upstream and once through the gateway (alternating which goes first), with the same
   keep-alive ``httpx`` client; p50/p99 of both and of the difference.
2. **Replay**: the request set of :mod:`evals.cache_replay` (the one ``evals.cache_full
   --replay`` looks up in process), built deterministically from the development set
   ``cache_pairs_dev.jsonl`` (``$EVERMIND_EVAL_DIR``, else ``shared/eval`` next to the
   checkout; see :mod:`evals`): every triple's ``query`` first (misses, stored), then, in a
   seeded shuffle, each ``query`` again (a repeat), its ``paraphrase`` and its
   ``near_miss``. Reported: hit rate (overall and per kind), tokens and dollars saved (the
   gateway's ``evermind`` field), **wrong answers served** (a hit whose stored question is
   neither the asked question nor a paraphrase of it: any hit on a near-miss, or a hit on
   another triple's entry), and the latency of hits.

It measures; it asserts nothing about time. Run as ``python -m benchmarks.gateway`` or
``evermind bench gateway``.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import httpx
from evals.cache_replay import PROBES, WARMUPS, Ask, load_triples, probe_text, replay_set

ROOT = Path(__file__).resolve().parents[1]
MODEL = "gpt-4o-mini"
KEY = "sk-bench-gateway-upstream"
CONFIGS = ("none", "terms", "nano")
#: The upstream in its own process: prints its port, serves until stdin closes.
#: With a second argument, a JSON file {question: answer}: the upstream answers by meaning (a
#: paraphrase gets its question's answer), as the verified cache's checks need.
_UPSTREAM = (
    "import json, sys; from tests.upstreams import OpenAIUpstream, default_reply; "
    "a = json.load(open(sys.argv[2])) if len(sys.argv) > 2 else {}; "
    "u = OpenAIUpstream(sys.argv[1], reply=lambda t: a.get(t) or default_reply(t)).start(); "
    "print(u.port, flush=True); sys.stdin.read(); u.stop()"
)


def _python_env() -> dict[str, str]:
    env = dict(os.environ)
    paths = [str(ROOT / "src"), str(ROOT), env.get("PYTHONPATH", "")]
    env["PYTHONPATH"] = os.pathsep.join(p for p in paths if p)
    for variable in ("OPENBLAS_NUM_THREADS", "OMP_NUM_THREADS", "MKL_NUM_THREADS"):
        env.setdefault(variable, "1")
    return env


class Upstream:
    """The loopback OpenAI upstream (:class:`tests.upstreams.OpenAIUpstream`) in a process
    of its own, in this process's group (a group kill reaches it)."""

    def __init__(self, env: dict[str, str], replies: Path | None = None) -> None:
        self.process = subprocess.Popen(
            [sys.executable, "-c", _UPSTREAM, KEY, *([str(replies)] if replies else [])],
            cwd=ROOT, env=env, stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True,
        )  # fmt: skip
        assert self.process.stdout is not None
        try:
            self.url = f"http://127.0.0.1:{int(self.process.stdout.readline())}"
        except BaseException:
            self.stop()
            raise

    def stop(self) -> None:
        """Closes its stdin (it stops serving), then kills it if it has not gone in 15 s."""
        if self.process.stdin is not None:
            self.process.stdin.close()
        try:
            self.process.wait(timeout=15)
        except subprocess.TimeoutExpired:
            self.process.kill()
            self.process.wait()


def write_config(
    folder: Path,
    embedder: str,
    upstream_url: str,
    l2: bool = True,
    cache: dict[str, Any] | None = None,
) -> Path:
    """The ``--upstreams`` file of a benchmark gateway: one OpenAI upstream, ``embedder``,
    and any other ``[cache]`` settings in ``cache`` (``max_error``, ``verify_sample``)."""
    config = folder / "upstreams.json"
    config.write_text(
        json.dumps(
            {
                "cache": {"embedder": embedder, "capacity": 100_000, "l2": l2, **(cache or {})},
                "upstreams": {
                    "openai": {
                        "protocol": "openai",
                        "base_url": upstream_url + "/v1",
                        "api_key": KEY,
                        "max_retries": 0,
                    }
                },
            }
        ),
        encoding="utf-8",
    )
    return config


class Processes:
    """The upstream and the gateway, each in its own process, for one configuration
    (``cache``: more ``[cache]`` settings; ``replies``: the upstream's answers by question)."""

    def __init__(
        self,
        folder: Path,
        embedder: str,
        l2: bool = True,
        cache: dict[str, Any] | None = None,
        replies: Path | None = None,
    ) -> None:
        from benchmarks.serve import Server

        env = _python_env()
        self.upstream = Upstream(env, replies)
        self.upstream_url = self.upstream.url
        config = write_config(folder, embedder, self.upstream_url, l2, cache)
        try:
            self.gateway = Server(
                folder / "data", extra=["--upstreams", str(config)], env=env, cwd=ROOT, start_s=400
            )
        except BaseException:
            self.upstream.stop()
            raise
        self.url = self.gateway.url

    def stop(self) -> None:
        self.gateway.stop()
        self.upstream.stop()


def body(text: str, model: str) -> dict[str, Any]:
    return {"model": model, "messages": [{"role": "user", "content": text}], "temperature": 0}


def timed(client: httpx.Client, url: str, body: dict[str, Any]) -> tuple[float, httpx.Response]:
    # The upstream wants its key; the gateway (no tokens file, loopback) wants none.
    headers = {} if body["model"].startswith("openai/") else {"Authorization": f"Bearer {KEY}"}
    start = time.perf_counter()
    response = client.post(url, json=body, headers=headers)
    elapsed = time.perf_counter() - start
    response.raise_for_status()
    return elapsed, response


def quantiles(seconds: Sequence[float]) -> dict[str, float | None]:
    if not seconds:
        return {"p50_ms": None, "p99_ms": None}
    ordered = sorted(seconds)
    p99 = ordered[min(len(ordered) - 1, round(0.99 * (len(ordered) - 1)))]
    return {"p50_ms": 1000 * statistics.median(ordered), "p99_ms": 1000 * p99}


def overhead(procs: Processes, client: httpx.Client, probes: int) -> dict[str, Any]:
    direct: list[float] = []
    through: list[float] = []
    for i in range(probes):
        text = probe_text(i)
        runs = [
            (direct, procs.upstream_url + "/v1/chat/completions", body(text, MODEL)),
            (through, procs.url + "/v1/chat/completions", body(text, f"openai/{MODEL}")),
        ]
        for samples, url, payload in runs if i % 2 == 0 else runs[::-1]:
            samples.append(timed(client, url, payload)[0])
    difference = [b - a for a, b in zip(direct, through, strict=True)]
    return {
        "probes": probes,
        "direct": quantiles(direct),
        "gateway": quantiles(through),
        "overhead": quantiles(difference),
        "overhead_p50_of_medians_ms": 1000
        * (statistics.median(through) - statistics.median(direct)),
    }


def _replay(
    procs: Processes, client: httpx.Client, asks: Sequence[Ask], triples: Sequence[dict[str, str]]
) -> dict[str, Any]:
    kinds = ("query", "repeat", "paraphrase", "near_miss")
    sent = dict.fromkeys(kinds, 0)
    hits = dict.fromkeys(kinds, 0)
    wrong: list[dict[str, str]] = []
    saved_tokens = {"input": 0, "output": 0, "cache_read": 0, "cache_write": 0}
    saved_usd = 0.0
    priced = 0
    paid_usd = 0.0
    hit_seconds: list[float] = []
    miss_seconds: list[float] = []
    for ask in asks:
        seconds, response = timed(
            client, procs.url + "/v1/chat/completions", body(ask.text, f"openai/{MODEL}")
        )
        sent[ask.kind] += 1
        field = response.json().get("evermind", {})
        paid_usd += field.get("cost_usd") or 0.0
        if not field.get("cached"):
            miss_seconds.append(seconds)
            continue
        hits[ask.kind] += 1
        hit_seconds.append(seconds)
        for kind, count in field["saved_tokens"].items():
            saved_tokens[kind] += count
        if field.get("saved_usd") is not None:
            saved_usd += field["saved_usd"]
            priced += 1
        triple = triples[ask.triple]
        right = {triple["query"], triple["paraphrase"]} if ask.kind != "near_miss" else set()
        if field.get("cached_query") not in right:
            wrong.append({"kind": ask.kind, "asked": ask.text, "served": field.get("cached_query")})
    total = sum(sent.values())
    return {
        "requests": total,
        "sent": sent,
        "hits": hits,
        "hit_rate": sum(hits.values()) / total if total else 0.0,
        "saved_tokens": saved_tokens,
        "saved_usd": saved_usd if priced else None,
        "paid_usd": paid_usd,
        "wrong_answers_served": len(wrong),
        "wrong_examples": wrong[:5],
        "hit_latency": quantiles(hit_seconds),
        "miss_latency": quantiles(miss_seconds),
    }


def _embedder_spec(name: str, folder: Path) -> str:
    if name.startswith("package:"):
        path = Path(name.removeprefix("package:")).resolve()
        if not path.is_file():
            raise SystemExit(f"--embedders: {name}: no such package file")
        return f"package:{path}"
    if name != "nano":
        return name
    from benchmarks.serve import nano_package

    package = folder / "nano.evermind"
    package.write_bytes(nano_package())
    return f"package:{package}"


def run_gateway_bench(
    configs: Sequence[str] = CONFIGS,
    probes: int = PROBES,
    limit: int | None = None,
    eval_dir: Path | None = None,
    l2: bool = True,
) -> dict[str, Any]:
    """The benchmark's document: per configuration, the overhead and the replay (``l2``:
    the runtime's SQLite L2 behind the in-process L1)."""
    triples = load_triples(eval_dir, limit)
    asks = replay_set(triples)
    load_before = _load_average()
    rows = []
    for name in configs:
        with tempfile.TemporaryDirectory(prefix="evermind-bench-gateway-") as tmp:
            folder = Path(tmp)
            procs = Processes(folder, _embedder_spec(name, folder), l2)
            try:
                with httpx.Client(timeout=60) as client:
                    for text in WARMUPS:  # warm both paths (connections, imports)
                        timed(
                            client,
                            procs.url + "/v1/chat/completions",
                            body(text, f"openai/{MODEL}"),
                        )
                        timed(
                            client, procs.upstream_url + "/v1/chat/completions", body(text, MODEL)
                        )
                    cost = overhead(procs, client, probes)
                    replay = _replay(procs, client, asks, triples) if name != "none" else None
            finally:
                procs.stop()
        rows.append({"embedder": name, "overhead": cost, "replay": replay})
    return {
        "bench": "gateway",
        "triples": len(triples),
        "replayed": len(asks),
        "cpu_count": os.cpu_count(),
        # The 1-minute load average before and after: on shared cores, what else ran.
        "load_average": [load_before, _load_average()],
        "l2": l2,
        "rows": rows,
    }


def _load_average() -> float | None:
    try:
        return round(os.getloadavg()[0], 2)
    except OSError:  # not every platform has one
        return None


def _ms(value: float | None) -> str:
    return "-" if value is None else f"{value:.2f}"


def format_table(doc: dict[str, Any]) -> str:
    """The document as two Markdown tables."""
    out = [
        f"Gateway replay: {doc['triples']} triples, {doc['replayed']} requests per embedder "
        f"({doc['cpu_count']} CPUs, load average {doc['load_average'][0]} before and "
        f"{doc['load_average'][1]} after; L2 {'on' if doc['l2'] else 'off'})",
        "",
        "| embedder | direct p50 ms | direct p99 ms | gateway p50 ms | gateway p99 ms "
        "| overhead p50 ms | overhead p99 ms |",
        "| --- | --- | --- | --- | --- | --- | --- |",
    ]
    for row in doc["rows"]:
        o = row["overhead"]
        out.append(
            f"| {row['embedder']} | {_ms(o['direct']['p50_ms'])} | {_ms(o['direct']['p99_ms'])} "
            f"| {_ms(o['gateway']['p50_ms'])} | {_ms(o['gateway']['p99_ms'])} "
            f"| {_ms(o['overhead']['p50_ms'])} | {_ms(o['overhead']['p99_ms'])} |"
        )
    out += [
        "",
        "| embedder | hit rate | repeat | paraphrase | near-miss | wrong served "
        "| tokens saved | $ saved | hit p50 ms | hit p99 ms |",
        "| --- | --- | --- | --- | --- | --- | --- | --- | --- | --- |",
    ]
    for row in doc["rows"]:
        r = row["replay"]
        if r is None:
            continue
        sent, hits = r["sent"], r["hits"]
        share = {k: f"{hits[k]}/{sent[k]}" for k in sent}
        usd = "-" if r["saved_usd"] is None else f"{r['saved_usd']:.4f}"
        out.append(
            f"| {row['embedder']} | {r['hit_rate']:.3f} | {share['repeat']} "
            f"| {share['paraphrase']} | {share['near_miss']} | {r['wrong_answers_served']} "
            f"| {sum(r['saved_tokens'].values())} | {usd} "
            f"| {_ms(r['hit_latency']['p50_ms'])} | {_ms(r['hit_latency']['p99_ms'])} |"
        )
    return "\n".join(out)


def main(argv: Sequence[str] | None = None) -> int:
    """``python -m benchmarks.gateway [--quick] [--json] ...``; returns the exit status."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="40 triples, 50 probes")
    parser.add_argument("--json", action="store_true", help="print JSON instead of tables")
    parser.add_argument(
        "--probes", type=int, default=PROBES, help=f"overhead probes (default {PROBES})"
    )
    parser.add_argument("--limit", type=int, help="replay only the first N triples")
    parser.add_argument(
        "--embedders",
        default=",".join(CONFIGS),
        help=f"comma-separated, some of {','.join(CONFIGS)} or package:PATH (a trained "
        "package, e.g. the demo's dist/demo/evermind-default.evermind; default all)",
    )
    parser.add_argument("--eval-dir", type=Path, help="the development sets' folder")
    parser.add_argument("--no-l2", action="store_true", help="L1 only (no SQLite L2)")
    args = parser.parse_args(argv)
    configs = [c for c in args.embedders.split(",") if c]
    unknown = sorted(c for c in set(configs) - set(CONFIGS) if not c.startswith("package:"))
    if unknown:
        parser.error(f"--embedders: unknown {unknown}; expected some of {list(CONFIGS)}")
    doc = run_gateway_bench(
        configs,
        probes=50 if args.quick else args.probes,
        limit=40 if args.quick and args.limit is None else args.limit,
        eval_dir=args.eval_dir,
        l2=not args.no_l2,
    )
    print(json.dumps(doc, indent=2) if args.json else format_table(doc))
    return 0


if __name__ == "__main__":
    sys.exit(main())
