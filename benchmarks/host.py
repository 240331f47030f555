"""The benchmark's host-side measurements: numpy and PyTorch references, the headless browser.

Native-only (numpy; torch and transformers, imported inside the functions that need them,
are a bench-only dependency; Playwright drives the browser). What runs here:

- :func:`numpy_matmul_rows`: numpy's float32 matmul GFLOP/s at the kernel benchmark's
  shapes, the CPU roofline the WGSL matmul is compared with;
- :func:`numpy_model_bench`: the numpy CPU model (:class:`~evermind.train.cpu_backend.
  CpuBackend`, :class:`~evermind.model.cpu.CpuMamba`) at the nano shape;
- :func:`torch_model_bench`: ``transformers.MambaForCausalLM`` built from the same config
  and weights, trained with torch autograd + ``torch.optim.AdamW`` (the PyTorch reference);
- :func:`run_in_browser`: the Studio bundle in headless Chromium, calling worker handlers.

Every model benchmark returns the rows of :func:`evermind.studio.bench.suite.gpu_model_bench`:
``{"metric", "value", "unit", "detail"}``.
"""

from __future__ import annotations

import asyncio
import contextlib
import importlib
import json
import logging
import statistics
import time
from collections.abc import Callable, Iterator, Sequence
from functools import partial
from pathlib import Path
from typing import Any

import numpy as np

from evermind.errors import ConfigError, GPUError
from evermind.model.init import init_params
from evermind.studio.bench.kernels_dense import MATMUL_SHAPES
from evermind.studio.bench.suite import (
    BENCH_LR,
    EMBED_TOKENS,
    NANO_BATCH,
    NANO_SEQ_LEN,
    NANO_VOCAB,
    nano_config,
    synthetic_batch,
)
from evermind.train.cpu_backend import CpuBackend
from evermind.train.loop import TrainConfig

log = logging.getLogger(__name__)

#: How long the browser may take to boot Pyodide and open WebGPU, and to answer one call.
BOOT_TIMEOUT_S = 180.0
CALL_TIMEOUT_S = 900.0


@contextlib.contextmanager
def blas_threads(threads: int) -> Iterator[str]:
    """Limits numpy's BLAS to ``threads`` while the block runs; yields what was done.

    Uses ``threadpoolctl`` when it is installed (a bench-only dependency); without it the
    BLAS keeps its default thread count and the yielded note says so.
    """
    try:  # untyped module: imported by name so that strict typing does not need its stubs
        threadpoolctl: Any = importlib.import_module("threadpoolctl")
    except ImportError:
        yield "BLAS threads: default (pip install threadpoolctl to limit them)"
        return
    with threadpoolctl.threadpool_limits(limits=threads, user_api="blas"):
        yield f"{threads} BLAS thread{'s' * (threads > 1)}"


def _median_s(fn: Callable[[], object], repeats: int) -> float:
    """Median seconds of ``fn()`` after one warm-up call."""
    fn()
    samples = []
    for _ in range(max(1, repeats)):
        start = time.perf_counter()
        fn()
        samples.append(time.perf_counter() - start)
    return statistics.median(samples)


def _best_s(fn: Callable[[], object], repeats: int) -> float:
    """Fastest seconds of ``fn()`` over ``repeats`` calls, after one warm-up call."""
    fn()
    best = float("inf")
    for _ in range(max(1, repeats)):
        start = time.perf_counter()
        fn()
        best = min(best, time.perf_counter() - start)
    return best


def _mean_s(fn: Callable[[], object], count: int) -> float:
    """Mean seconds of ``fn()`` over ``count`` calls, after one warm-up call."""
    fn()
    start = time.perf_counter()
    for _ in range(max(1, count)):
        fn()
    return (time.perf_counter() - start) / max(1, count)


def _metric(metric: str, value: float, unit: str, detail: str) -> dict[str, Any]:
    return {"metric": metric, "value": round(value, 3), "unit": unit, "detail": detail}


def _sizes(quick: bool) -> tuple[int, int, int, int]:
    """(training steps, forward passes, generated tokens, embedding repeats)."""
    return (2, 3, 16, 3) if quick else (5, 8, 64, 7)


# -- numpy ----------------------------------------------------------------------------------
def numpy_matmul_rows(quick: bool = False) -> list[dict[str, Any]]:
    """numpy's float32 GFLOP/s at every shape of ``kernels_dense.MATMUL_SHAPES``.

    Same shapes and transposes as the WGSL matmul rows (``quick`` skips the ones above
    512³, as the kernel benchmark does), so the two line up row by row. A roofline is a
    peak, so each row keeps the fastest of its repeats, with the BLAS at its default
    threads and at one thread (on a busy machine, BLAS threads stall waiting for each
    other); that also makes it less sensitive to other work on the machine than a median.

    Returns:
        Rows ``{"kernel": "matmul <mode>", "shape", "ms", "gflops"}``.
    """
    rng = np.random.default_rng(0)
    rows: list[dict[str, Any]] = []
    for label, m, n, k, mode in MATMUL_SHAPES:
        if quick and m * n * k > 512**3:
            continue
        a = rng.standard_normal((k, m) if mode == "TN" else (m, k), dtype=np.float32)
        b = rng.standard_normal((n, k) if mode == "NT" else (k, n), dtype=np.float32)
        left = a.T if mode == "TN" else a
        right = b.T if mode == "NT" else b
        multiply = partial(np.matmul, left, right)
        seconds = _best_s(multiply, 5 if quick else 9)
        with blas_threads(1):
            seconds = min(seconds, _best_s(multiply, 5 if quick else 9))
        rows.append(
            {
                "kernel": f"matmul {mode}",
                "shape": label,
                "ms": round(1e3 * seconds, 3),
                "gflops": round(2.0 * m * n * k / seconds / 1e9, 3),
            }
        )
    return rows


def numpy_model_bench(quick: bool = False, threads: int | None = None) -> list[dict[str, Any]]:
    """The numpy CPU model's training / forward / generation speed and embedding latency.

    Training is :class:`CpuBackend` (numpy forward + backward + AdamW); forward is its
    ``eval_batch`` (forward + loss); generation is greedy :meth:`CpuMamba.step` (what
    ``Model.stream`` runs per token, without its sampling and text decoding); the
    embedding is :meth:`CpuMamba.embed` of one 64-token text.

    Args:
        quick: Fewer steps and tokens.
        threads: numpy's BLAS threads (None keeps the BLAS default); see :func:`blas_threads`.
    """
    if threads is None:
        return _numpy_model_bench(quick, "default BLAS threads")
    with blas_threads(threads) as note:
        return _numpy_model_bench(quick, note)


def _numpy_model_bench(quick: bool, note: str) -> list[dict[str, Any]]:
    steps, forwards, new_tokens, embeds = _sizes(quick)
    cfg = nano_config()
    train = TrainConfig(batch_size=NANO_BATCH, seq_len=NANO_SEQ_LEN, lr=BENCH_LR)
    backend = CpuBackend(cfg, init_params(cfg, 0), train)
    batch = synthetic_batch(NANO_BATCH, NANO_SEQ_LEN, NANO_VOCAB)
    tokens = NANO_BATCH * NANO_SEQ_LEN

    step = iter(range(1, 1 << 30))
    train_s = _mean_s(lambda: asyncio.run(backend.train_step([batch], BENCH_LR, next(step))), steps)
    forward_s = _mean_s(lambda: asyncio.run(backend.eval_batch(batch)), forwards)

    model = backend.model
    state = model.init_state(1)
    logits, state = model.step(np.array([batch[0][0]]), state)
    start = time.perf_counter()
    for _ in range(new_tokens):
        logits, state = model.step(np.array([int(np.argmax(logits[0]))]), state)
    generate_s = time.perf_counter() - start

    ids = np.array(batch[0][:EMBED_TOKENS], np.int64)[None, :]
    mask = np.ones_like(ids, dtype=bool)
    embed_s = _median_s(lambda: model.embed(ids, mask), embeds)
    shape = f"nano B{NANO_BATCH} L{NANO_SEQ_LEN} V{NANO_VOCAB}"
    return [
        _metric("train_tokens_per_s", tokens / train_s, "tok/s", f"{shape}, {steps} steps, {note}"),
        _metric("forward_tokens_per_s", tokens / forward_s, "tok/s", f"{shape}, + loss"),
        _metric("generate_tokens_per_s", new_tokens / generate_s, "tok/s", "greedy CpuMamba.step"),
        _metric("embed_64_ms", 1e3 * embed_s, "ms", f"one {EMBED_TOKENS}-token text, median"),
    ]


# -- PyTorch ----------------------------------------------------------------------------------
def torch_available() -> bool:
    """Whether torch and transformers import (the PyTorch reference is optional)."""
    try:
        import torch  # noqa: F401
        import transformers  # noqa: F401
    except ImportError:
        return False
    return True


def torch_default_threads() -> int:
    """torch's intra-op thread count before the benchmark changes it."""
    import torch

    return int(torch.get_num_threads())


def torch_model_bench(quick: bool = False, threads: int | None = None) -> list[dict[str, Any]]:
    """The PyTorch CPU reference: ``MambaForCausalLM`` from our nano config and weights.

    Training is torch autograd + ``clip_grad_norm_`` + ``torch.optim.AdamW`` with our
    decay groups; forward is ``inference_mode`` logits + cross-entropy; generation is a
    greedy loop over the model's recurrent cache (one token per call); the embedding is
    the backbone's final normed hidden state, mean-pooled and L2-normalised.
    transformers without ``mamba_ssm`` runs its slow PyTorch path, as it does on any CPU.

    Args:
        quick: Fewer steps and tokens.
        threads: torch's intra-op threads (None keeps torch's default).

    Raises:
        ConfigError: torch or transformers is not installed.
    """
    if not torch_available():
        raise ConfigError(
            "the PyTorch reference needs torch and transformers; install them "
            "(pip install torch transformers) or run without it"
        )
    import torch
    import transformers as hf_module

    # Typed loosely: transformers is untyped, and torch's stubs do not cover the HF model.
    transformers: Any = hf_module
    functional: Any = torch.nn.functional
    transformers.logging.set_verbosity_error()  # the slow-path notices, once per kernel
    if threads is not None:
        torch.set_num_threads(threads)
    used = torch.get_num_threads()
    steps, forwards, new_tokens, embeds = _sizes(quick)
    cfg = nano_config()
    shapes = cfg.param_shapes()
    model: Any = transformers.MambaForCausalLM(
        transformers.MambaConfig(**cfg.to_hf_config())
    ).float()
    state = {
        name: torch.from_numpy(np.frombuffer(values, np.float32).reshape(shapes[name]).copy())
        for name, values in init_params(cfg, 0).items()
    }
    model.load_state_dict(state, strict=False)  # lm_head is tied to the embedding
    train = TrainConfig()
    named = list(model.named_parameters())
    groups: list[dict[str, Any]] = [
        {"params": [p for n, p in named if not cfg.no_decay(n)]},
        {"params": [p for n, p in named if cfg.no_decay(n)], "weight_decay": 0.0},
    ]
    optimizer = torch.optim.AdamW(
        groups,
        lr=BENCH_LR,
        betas=(train.beta1, train.beta2),
        eps=train.eps,
        weight_decay=train.weight_decay,
    )
    inputs, targets = synthetic_batch(NANO_BATCH, NANO_SEQ_LEN, NANO_VOCAB)
    ids = torch.tensor(inputs, dtype=torch.long).reshape(NANO_BATCH, NANO_SEQ_LEN)
    target = torch.tensor(targets, dtype=torch.long).reshape(-1)
    tokens = NANO_BATCH * NANO_SEQ_LEN

    def train_step() -> None:
        logits = model(ids).logits.reshape(-1, cfg.vocab_size)
        loss = functional.cross_entropy(logits, target)
        optimizer.zero_grad(set_to_none=True)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), train.grad_clip)
        optimizer.step()

    model.train()
    train_s = _mean_s(train_step, steps)
    model.eval()
    with torch.inference_mode():

        def forward() -> None:
            logits = model(ids).logits.reshape(-1, cfg.vocab_size)
            functional.cross_entropy(logits, target)

        forward_s = _mean_s(forward, forwards)
        out = model(ids[:1, :1], use_cache=True)
        cache, token = out.cache_params, out.logits[:, -1].argmax(-1, keepdim=True)
        out = model(token, cache_params=cache, use_cache=True)  # warm-up of the cached path
        start = time.perf_counter()
        for _ in range(new_tokens):
            token = out.logits[:, -1].argmax(-1, keepdim=True)
            out = model(token, cache_params=cache, use_cache=True)
        generate_s = time.perf_counter() - start
        text = ids[:1, :EMBED_TOKENS]

        def embed() -> None:
            hidden = model.backbone(text).last_hidden_state.mean(1)
            functional.normalize(hidden, dim=-1)

        embed_s = _median_s(embed, embeds)
    shape = f"nano B{NANO_BATCH} L{NANO_SEQ_LEN} V{NANO_VOCAB}"
    return [
        _metric(
            "train_tokens_per_s",
            tokens / train_s,
            "tok/s",
            f"{shape}, {steps} steps, {used} thread(s)",
        ),
        _metric("forward_tokens_per_s", tokens / forward_s, "tok/s", f"{shape}, + loss"),
        _metric("generate_tokens_per_s", new_tokens / generate_s, "tok/s", "greedy, cached"),
        _metric("embed_64_ms", 1e3 * embed_s, "ms", f"one {EMBED_TOKENS}-token text, median"),
    ]


# -- the browser ------------------------------------------------------------------------------
def run_in_browser(
    bundle: Path,
    calls: Sequence[tuple[str, dict[str, Any]]],
    call_timeout_s: float = CALL_TIMEOUT_S,
) -> list[Any]:
    """Boots the Studio bundle in headless Chromium and runs worker calls, in order.

    Args:
        bundle: A built bundle folder (``dist/web``).
        calls: ``(handler name, keyword arguments)`` pairs for ``window.evermind.call``.
        call_timeout_s: The longest one call may take.

    Returns:
        Each call's result, in order.

    Raises:
        GPUError: The page did not boot, has no WebGPU device, or a call failed or timed
            out (the message carries the browser's error and its last console lines).
    """
    from playwright.sync_api import Error as PlaywrightError
    from playwright.sync_api import sync_playwright

    from evermind.studio.browser import launch_options
    from evermind.studio.webserver import BundleServer

    console: list[str] = []
    results: list[Any] = []
    with BundleServer(bundle) as server, sync_playwright() as p:
        browser = p.chromium.launch(**launch_options(p))
        try:
            page = browser.new_page()
            page.on("console", lambda m: console.append(f"{m.type}: {m.text}"))
            page.goto(server.url + "index.html")
            try:
                page.wait_for_function("window.__done === true", timeout=1e3 * BOOT_TIMEOUT_S)
            except PlaywrightError as err:
                raise GPUError(
                    _browser_failure("the Studio page did not boot", err, console)
                ) from err
            booted = page.evaluate("window.__evermind")
            if not booted.get("ok"):
                raise GPUError(
                    f"the Studio page has no WebGPU device: {booted.get('error')}; "
                    "hint: `evermind doctor` checks Chromium's WebGPU"
                )
            for name, kwargs in calls:
                log.info("browser: %s(%s)", name, json.dumps(kwargs))
                results.append(_call(page, name, kwargs, call_timeout_s, console))
        finally:
            browser.close()
    return results


def _call(
    page: Any, name: str, kwargs: dict[str, Any], timeout_s: float, console: list[str]
) -> Any:
    """One worker call, waited for with a bounded timeout (the result lands on ``window``)."""
    from playwright.sync_api import Error as PlaywrightError

    page.evaluate(
        """([fn, kwargs]) => {
            window.__bench = null;
            window.evermind.call(fn, kwargs).then(
                (result) => { window.__bench = { ok: true, result }; },
                (err) => { window.__bench = { ok: false, error: `${err.name}: ${err.message}` }; });
        }""",
        [name, kwargs],
    )
    try:
        page.wait_for_function("window.__bench !== null", timeout=1e3 * timeout_s, polling=500)
    except PlaywrightError as err:
        raise GPUError(
            _browser_failure(f"browser call {name} did not finish", err, console)
        ) from err
    outcome = page.evaluate("window.__bench")
    if not outcome["ok"]:
        raise GPUError(f"browser call {name} failed: {outcome['error']}")
    return outcome["result"]


def _browser_failure(what: str, err: Exception, console: list[str]) -> str:
    tail = "\n  ".join(console[-8:]) or "(no console output)"
    return f"{what}: {err}; last console lines:\n  {tail}"
