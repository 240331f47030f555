"""``evermind bench serve``: throughput and latency of a live runtime on loopback (native-only).

Starts ``evermind serve`` in a subprocess (fresh data directory, no auth, no rate limit),
pushes a package (by default a freshly initialised nano model: d_model 128, 4 layers, a
2048-token BPE vocabulary trained on standard-library docstrings; untrained weights cost
the same to run), then for each request kind and client count runs closed-loop clients for
a fixed time and reports requests/s and p50/p99 latency. Finally it measures generation
tokens/s of the same model in-process against the PyTorch CPU reference
(``transformers.MambaForCausalLM`` loaded from the package's config and weights) and
reports the ratio. Run as ``python -m benchmarks.serve`` or ``evermind bench serve``.
"""

from __future__ import annotations

import argparse
import asyncio
import importlib.util
import io
import json
import os
import subprocess
import sys
import tempfile
import time
import zipfile
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import httpx
import numpy as np

EMBED_TEXT = "Memories are recalled by meaning and by exact words; caches save repeated work."
PROMPT = "The standard library"


def nano_package() -> bytes:
    """A nano model package (d_model 128, 4 layers, 2048-token vocabulary), untrained."""
    from evermind.job import JobConfig, export_package, model_config, train_tokenizer
    from evermind.model.init import init_params
    from evermind.train.corpus import harvest_stdlib_docstrings

    text = harvest_stdlib_docstrings(200_000)
    tokenizer = train_tokenizer(text, 2048)
    job = JobConfig(name="bench-nano", version="1.0.0", preset="nano", vocab_size=2048)
    config = model_config(job, tokenizer)
    return export_package(
        job, config, init_params(config, 0), tokenizer, None, "stdlib docstrings", "cpu"
    )


class Server:
    """``evermind serve`` on a free loopback port, for a benchmark.

    It stays in the caller's process group, so whoever kills that group on a timeout (a
    test, ``benchmarks/gpu.sh``'s stage runner) kills the server with it.

    Args:
        data: The server's data directory.
        device: ``--device``.
        extra: More ``evermind serve`` arguments (e.g. ``--upstreams FILE``).
        env: The child's environment (None: this one's).
        cwd: The child's working directory.
        start_s: Seconds it may take to answer ``/healthz``.
    """

    def __init__(
        self,
        data: Path,
        device: str = "auto",
        extra: Sequence[str] = (),
        env: dict[str, str] | None = None,
        cwd: Path | None = None,
        start_s: float = 60.0,
    ) -> None:
        from evermind.runtime.server import free_port

        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        command = [
            sys.executable, "-m", "evermind.cli", "serve", "--port", str(self.port),
            "--data", str(data), "--rate-limit", "0", "--log-level", "warning",
            "--device", device, *extra,
        ]  # fmt: skip
        self.process = subprocess.Popen(command, stdout=subprocess.DEVNULL, env=env, cwd=cwd)
        deadline = time.monotonic() + start_s
        while time.monotonic() < deadline:
            try:
                if httpx.get(self.url + "/healthz", timeout=1).status_code == 200:
                    return
            except httpx.HTTPError:
                time.sleep(0.1)
        self.stop()
        raise RuntimeError(f"the benchmark server did not start within {start_s:g} s")

    def stop(self) -> None:
        """Terminates the server (it starts no processes of its own); kills it if it lingers."""
        self.process.terminate()
        try:
            self.process.wait(timeout=15)
        except subprocess.TimeoutExpired:
            self.process.kill()
            self.process.wait()


class RawConnection:
    """One keep-alive HTTP/1.1 connection that posts JSON and reads ``Content-Length`` replies.

    The load generator of :func:`_cell` by default: an ``httpx.AsyncClient`` shared by 32
    workers costs its process about 3.6 ms of CPU a request (measured: 0.36 cores at 100
    requests/s), on the same two cores as the server it measures, and at 32 clients it halved
    the embeddings' requests/s; this costs a small fraction of that (``--client httpx`` keeps
    the old one).
    """

    def __init__(self, url: str) -> None:
        self.host = url.split("//", 1)[1].rstrip("/")
        name, _, port = self.host.partition(":")
        self.address = (name, int(port or 80))
        self.streams: tuple[asyncio.StreamReader, asyncio.StreamWriter] | None = None

    async def post(self, path: str, payload: dict[str, Any]) -> tuple[int, bytes]:
        """(status, body) of one POST; reconnects once if the server closed the connection."""
        body = json.dumps(payload).encode()
        head = (
            f"POST {path} HTTP/1.1\r\nHost: {self.host}\r\nContent-Type: application/json\r\n"
            f"Content-Length: {len(body)}\r\n\r\n"
        ).encode()
        for attempt in (0, 1):
            if self.streams is None:
                self.streams = await asyncio.open_connection(*self.address)
            reader, writer = self.streams
            writer.write(head + body)
            status_line = await reader.readline()
            if status_line:
                break
            await self.close()  # closed by the server between requests
            if attempt:
                raise ConnectionError(f"{self.host} closed the connection")
        length, closing = 0, False
        while (line := await reader.readline()) not in (b"\r\n", b""):
            name, _, value = line.partition(b":")
            key = name.strip().lower()
            if key == b"content-length":
                length = int(value)
            elif key == b"connection" and value.strip().lower() == b"close":
                closing = True
        data = await reader.readexactly(length)
        if closing:
            await self.close()
        return int(status_line.split()[1]), data

    async def close(self) -> None:
        """Closes the connection (the next post opens a new one)."""
        if self.streams is not None:
            self.streams[1].close()
            self.streams = None


async def _cell(
    url: str,
    kind: str,
    model: str,
    clients: int,
    seconds: float,
    max_tokens: int,
    top_k: int | None = None,
    client_kind: str = "raw",
) -> dict[str, Any]:
    body: dict[str, Any]
    if kind == "embeddings":
        path, body = "/v1/embeddings", {"model": model, "input": EMBED_TEXT}
    else:
        path = "/v1/completions"
        body = {"model": model, "prompt": PROMPT, "max_tokens": max_tokens, "temperature": 1.0}
        if top_k:
            body["top_k"] = top_k
    latencies: list[float] = []
    tokens = 0
    errors = 0
    limits = httpx.Limits(max_connections=clients, max_keepalive_connections=clients)
    async with httpx.AsyncClient(base_url=url, limits=limits, timeout=120) as client:
        start = time.perf_counter()
        deadline = start + seconds

        async def worker(index: int) -> None:
            nonlocal tokens, errors
            n = 0
            raw = RawConnection(url) if client_kind == "raw" else None
            while time.perf_counter() < deadline:
                payload = {**body, "seed": index * 100_003 + n} if kind != "embeddings" else body
                n += 1
                sent = time.perf_counter()
                if raw is not None:
                    status, data = await raw.post(path, payload)
                else:
                    response = await client.post(path, json=payload)
                    status, data = response.status_code, response.content
                if status != 200:
                    errors += 1
                    continue
                latencies.append(time.perf_counter() - sent)
                if kind != "embeddings":
                    tokens += int(json.loads(data)["usage"]["completion_tokens"])
            if raw is not None:
                await raw.close()

        await asyncio.gather(*(worker(i) for i in range(clients)))
        elapsed = time.perf_counter() - start
    ms = np.array(latencies) * 1000 if latencies else np.zeros(1)
    return {
        "kind": kind,
        "clients": clients,
        "requests": len(latencies),
        "errors": errors,
        "seconds": round(elapsed, 2),
        "requests_per_s": round(len(latencies) / elapsed, 1),
        "p50_ms": round(float(np.percentile(ms, 50)), 1),
        "p99_ms": round(float(np.percentile(ms, 99)), 1),
        "completion_tokens_per_s": round(tokens / elapsed, 1) if kind != "embeddings" else None,
        "completion_tokens": tokens if kind != "embeddings" else None,
    }


def _embedding_jobs(url: str) -> tuple[float, float] | None:
    """The server's embedding (jobs, texts) so far, from ``/metrics`` (None: it has none)."""
    found: dict[str, float] = {}
    for line in httpx.get(url + "/metrics", timeout=10).text.splitlines():
        name, _, value = line.partition(" ")
        if name in ("evermind_embedding_jobs_total", "evermind_embedding_texts_total"):
            found[name] = float(value)
    if len(found) < 2:
        return None
    return found["evermind_embedding_jobs_total"], found["evermind_embedding_texts_total"]


def _tokens_per_second_ours(package: bytes, new_tokens: int, seconds: float) -> float:
    import evermind

    model = evermind.load(package)
    model.complete(PROMPT, max_new_tokens=4, temperature=0)  # warm up
    produced, start = 0, time.perf_counter()
    while time.perf_counter() - start < seconds:
        produced += model.complete(
            PROMPT, max_new_tokens=new_tokens, temperature=0
        ).completion_tokens
    return produced / (time.perf_counter() - start)


def _tokens_per_second_scheduler(
    package: bytes, clients: int, new_tokens: int, seconds: float, top_k: int | None = None
) -> float:
    """Completion tokens/s of ``clients`` closed-loop requests through the runtime's batching
    scheduler in-process (no HTTP: the model's share of the serving cost alone)."""
    from concurrent.futures import ThreadPoolExecutor

    import evermind
    from evermind.runtime.generation import GenerationRequest
    from evermind.runtime.scheduler import Scheduler

    model = evermind.load(package)
    scheduler = Scheduler(ThreadPoolExecutor(2), slots=clients, batch_slots=max(1, clients))

    async def run() -> float:
        produced = 0
        await scheduler.complete(model, GenerationRequest(PROMPT, 4, temperature=0.0))  # warm up
        start = time.perf_counter()
        deadline = start + seconds

        async def worker(index: int) -> None:
            nonlocal produced
            n = 0
            while time.perf_counter() < deadline:
                seed = index * 100_003 + n
                request = GenerationRequest(PROMPT, new_tokens, top_k=top_k, seed=seed)
                n += 1
                result = await scheduler.complete(model, request)
                produced += result.completion_tokens  # after the await: no lost update

        await asyncio.gather(*(worker(i) for i in range(clients)))
        return produced / (time.perf_counter() - start)

    return asyncio.run(run())


def _tokens_per_second_torch(package: bytes, new_tokens: int, seconds: float) -> float:
    import importlib

    import evermind

    # Typed as Any: the reference is measured, not type-checked (transformers' stubs are loose).
    torch: Any = importlib.import_module("torch")
    transformers: Any = importlib.import_module("transformers")
    prompt_ids = evermind.load(package).tokenizer.encode(PROMPT)
    with tempfile.TemporaryDirectory() as folder:
        zipfile.ZipFile(io.BytesIO(package)).extractall(folder)
        model = transformers.MambaForCausalLM.from_pretrained(folder, dtype=torch.float32)
    model.eval()
    ids = torch.tensor([prompt_ids])
    options = {"max_new_tokens": new_tokens, "min_new_tokens": new_tokens, "do_sample": False}
    with torch.inference_mode():
        model.generate(ids, **{**options, "max_new_tokens": 4, "min_new_tokens": 4})
        produced, start = 0, time.perf_counter()
        while time.perf_counter() - start < seconds:
            out = model.generate(ids, **options)
            produced += int(out.shape[1] - ids.shape[1])
    return float(produced / (time.perf_counter() - start))


def run_serve_bench(
    package: bytes | None = None,
    seconds: float = 3.0,
    concurrency: Sequence[int] = (1, 8, 32),
    max_tokens: int = 32,
    top_k: int | None = None,
    reference: bool = True,
    device: str = "auto",
    client: str = "raw",
) -> dict[str, Any]:
    """Runs the whole benchmark and returns its rows and the generation comparison.

    Args:
        package: The package to serve; None builds the nano model.
        seconds: Length of each (kind, clients) cell.
        concurrency: Client counts.
        max_tokens: Completion length of the completion cells.
        top_k: The completions' ``top_k`` (None: the whole vocabulary, at temperature 1).
        reference: Also measure the PyTorch reference (needs torch and transformers).
        device: The server's ``--device`` (cpu, gpu or auto); its ``/healthz`` says which
            device decoded, in the result's ``device``.
        client: The load generator: ``raw`` (:class:`RawConnection`, light) or ``httpx``.
    """
    package = package if package is not None else nano_package()
    from evermind.runtime.push import push_package

    rows: list[dict[str, Any]] = []
    with tempfile.TemporaryDirectory() as folder:
        server = Server(Path(folder) / "data", device)
        try:
            serving = httpx.get(server.url + "/healthz", timeout=10).json().get("device")
            file = Path(folder) / "model.evermind"
            file.write_bytes(package)
            model = push_package(file, server.url)["id"]
            warm = {"model": model, "prompt": PROMPT, "max_tokens": 2}
            httpx.post(server.url + "/v1/completions", json=warm, timeout=60)
            for kind in ("embeddings", "completions"):
                for clients in concurrency:
                    before = _embedding_jobs(server.url)
                    cell = _cell(
                        server.url, kind, model, clients, seconds, max_tokens, top_k, client
                    )
                    rows.append(asyncio.run(cell))
                    after = _embedding_jobs(server.url)
                    if kind == "embeddings" and before and after and after[0] > before[0]:
                        texts = (after[1] - before[1]) / (after[0] - before[0])
                        rows[-1]["texts_per_job"] = round(texts, 2)
        finally:
            server.stop()
    generation: dict[str, Any] = {
        "new_tokens": max_tokens,
        "evermind_numpy_tokens_per_s": round(
            _tokens_per_second_ours(package, max_tokens, seconds), 1
        ),
    }
    from benchmarks.host import blas_threads

    if importlib.util.find_spec("evermind.runtime.scheduler") is None:  # a tree before it
        generation["scheduler_tokens_per_s"] = {}
    else:
        with blas_threads(1):  # as the server runs (evermind serve sets OPENBLAS_NUM_THREADS=1)
            generation["scheduler_tokens_per_s"] = {
                str(c): round(
                    _tokens_per_second_scheduler(package, c, max_tokens, seconds, top_k), 1
                )
                for c in concurrency
            }
    if reference:
        torch_rate = _tokens_per_second_torch(package, max_tokens, seconds)
        generation["pytorch_tokens_per_s"] = round(torch_rate, 1)
        generation["ratio_vs_pytorch"] = round(
            generation["evermind_numpy_tokens_per_s"] / torch_rate, 2
        )
    result = {
        "model": model,
        "client": client,
        "cpu_count": os.cpu_count(),
        "device": serving,
        "rows": rows,
        "generation": generation,
    }
    result["ratios"] = ratios(result)
    return result


def ratios(result: dict[str, Any]) -> dict[str, float]:
    """The issue-17 targets' ratios within one run: completion tokens/s at the most clients
    over one client, p99 at 8 clients over one client, embeddings req/s at the most clients
    over one client (absent where the run lacks the cells)."""
    cells = {(row["kind"], row["clients"]): row for row in result["rows"]}
    out: dict[str, float] = {}
    for kind, field, name in (
        ("completions", "completion_tokens_per_s", "completion_tok_s"),
        ("embeddings", "requests_per_s", "embedding_req_s"),
    ):
        counts = sorted(c for k, c in cells if k == kind)
        one = cells.get((kind, 1))
        if one and counts and counts[-1] > 1 and one[field]:
            out[f"{name}_{counts[-1]}_over_1"] = round(
                cells[(kind, counts[-1])][field] / one[field], 2
            )
    one, eight = cells.get(("completions", 1)), cells.get(("completions", 8))
    if one and eight and one["p99_ms"]:
        out["completion_p99_8_over_1"] = round(eight["p99_ms"] / one["p99_ms"], 2)
    return out


def format_table(result: dict[str, Any]) -> str:
    """The benchmark as a Markdown table plus the generation comparison line."""
    lines = [
        f"model {result['model']} on loopback, {result['cpu_count']} CPU(s), decoding on "
        f"{result.get('device')}, {result.get('client', 'httpx')} client",
        "",
        "| kind | clients | req/s | p50 ms | p99 ms | completion tok/s | texts a job | errors |",
        "| --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: |",
    ]
    for row in result["rows"]:
        rate = row["completion_tokens_per_s"]
        lines.append(
            f"| {row['kind']} | {row['clients']} | {row['requests_per_s']} | {row['p50_ms']} | "
            f"{row['p99_ms']} | {'' if rate is None else rate} | {row.get('texts_per_job', '')} "
            f"| {row['errors']} |"
        )
    gen = result["generation"]
    line = f"generation ({gen['new_tokens']} tokens, in-process): evermind numpy " + (
        f"{gen['evermind_numpy_tokens_per_s']} tok/s"
    )
    if gen.get("scheduler_tokens_per_s"):
        rates = ", ".join(f"{c} clients {r}" for c, r in gen["scheduler_tokens_per_s"].items())
        line += f"; batching scheduler without HTTP (tok/s): {rates}"
    if "pytorch_tokens_per_s" in gen:
        line += (
            f", PyTorch MambaForCausalLM {gen['pytorch_tokens_per_s']} tok/s, "
            f"ratio {gen['ratio_vs_pytorch']}x"
        )
    found = ratios(result)
    summary = ", ".join(f"{name} {value}x" for name, value in found.items())
    return "\n".join([*lines, "", line, *([f"ratios (same run): {summary}"] if found else [])])


def main(argv: Sequence[str] | None = None) -> int:
    """``python -m benchmarks.serve`` (``evermind bench serve``)."""
    parser = argparse.ArgumentParser(prog="evermind bench serve", description=__doc__)
    parser.add_argument("--package", help="serve this .evermind file (default: nano model)")
    parser.add_argument("--seconds", type=float, default=3.0, help="seconds per cell")
    parser.add_argument("--clients", default="1,8,32", help="comma-separated client counts")
    parser.add_argument("--max-tokens", type=int, default=32, help="completion length")
    parser.add_argument("--top-k", type=int, help="completions' top_k (default: none)")
    parser.add_argument("--no-reference", action="store_true", help="skip the PyTorch reference")
    parser.add_argument("--json", action="store_true", help="print JSON instead of a table")
    parser.add_argument(
        "--device", default="auto", choices=["cpu", "gpu", "auto"], help="the server's --device"
    )
    parser.add_argument(
        "--client",
        default="raw",
        choices=["raw", "httpx"],
        help="load generator: raw keep-alive HTTP/1.1 (light, default) or httpx (heavier)",
    )
    args = parser.parse_args(argv)
    result = run_serve_bench(
        Path(args.package).read_bytes() if args.package else None,
        seconds=args.seconds,
        concurrency=[int(c) for c in args.clients.split(",")],
        max_tokens=args.max_tokens,
        top_k=args.top_k,
        reference=not args.no_reference,
        device=args.device,
        client=args.client,
    )
    print(json.dumps(result, indent=1) if args.json else format_table(result))
    return 0


if __name__ == "__main__":
    sys.exit(main())
