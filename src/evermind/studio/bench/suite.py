"""Benchmarks that run on either transport: kernels, the training step's breakdown, the model.

Browser-safe (standard library and ``evermind`` only): the same functions run natively
(wgpu-py, from ``benchmarks/``) and in the tab (the Studio's ``bench_kernels`` /
``bench_train`` calls), so one CLI run can print both transports side by side. Nothing here
checks numbers: the tests do.

- :func:`run_kernel_bench`: every ``evermind.studio.bench.kernels_*`` module's rows.
- :func:`step_breakdown`: the nano model's recorded training step, its dispatches grouped
  by kernel family (the shader they run) and by phase, each group timed as one submit.
- :func:`gpu_model_bench`: training, forward, generation tokens/s and the latency to embed
  one 64-token text with :class:`~evermind.model.gpu.GpuMamba` (trained by
  :class:`~evermind.train.gpu_backend.GpuBackend`) and its decoder/embedder.
- :func:`train_and_measure` / :func:`gpu_block_bench`: one config trained on a given token
  stream and scored on a given held-out slice (``benchmarks/blocks.py`` compares block types
  with them; any :class:`~evermind.train.loop.Backend`, so the numpy CPU model too).

Every time is the median wall time of ``submit + sync`` (or of the whole call) after one
warm-up, so it includes one readback round trip; :func:`step_breakdown` reports that
round trip (the ``sync`` row) and subtracts it from each group before taking shares.
"""

from __future__ import annotations

import importlib
import logging
import pkgutil
import random
import statistics
import time
from array import array
from typing import Any

import evermind.studio.bench
from evermind import gpu
from evermind.errors import ConfigError
from evermind.gpu import Device, Dispatch
from evermind.model.config import MambaConfig
from evermind.model.gpu_infer import GpuDecoder, GpuEmbedder
from evermind.model.init import init_params
from evermind.model.sampling import sample
from evermind.studio.bench.timing import adapter_name, median_call_ms, median_ms
from evermind.train.gpu_backend import GpuBackend
from evermind.train.loop import Backend, Batch, Progress, TrainConfig, Trainer

log = logging.getLogger(__name__)

#: The benchmarked model: the nano preset at the issue's shape (B 4, L 128, vocab 2048).
NANO_PRESET = "nano"
NANO_VOCAB = 2048
NANO_BATCH = 4
NANO_SEQ_LEN = 128
#: Tokens in the text whose embedding latency is measured.
EMBED_TOKENS = 64
#: Learning rate of the benchmarked steps (any value: it does not change the timings).
BENCH_LR = 1e-3


def bench_modules() -> list[str]:
    """Names of the kernel benchmark modules, sorted."""
    return sorted(
        f"evermind.studio.bench.{m.name}"
        for m in pkgutil.iter_modules(evermind.studio.bench.__path__)
        if m.name.startswith("kernels_")
    )


async def run_kernel_bench(
    quick: bool = False, device: gpu.Device | None = None
) -> list[dict[str, Any]]:
    """Runs every kernel benchmark; each row gains ``transport`` and ``adapter`` fields."""
    dev = device or await gpu.open_device()
    adapter = adapter_name(dev)
    rows: list[dict[str, Any]] = []
    for name in bench_modules():
        module = importlib.import_module(name)
        for row in await module.bench(dev, quick=quick):
            rows.append({"transport": dev.transport, "adapter": adapter, **row})
    return rows


# -- the nano model ------------------------------------------------------------------------
def nano_config(vocab_size: int = NANO_VOCAB) -> MambaConfig:
    """The benchmarked model's config: the nano preset with ``vocab_size`` tokens."""
    return MambaConfig.preset(NANO_PRESET, vocab_size)


def synthetic_batch(batch_size: int, seq_len: int, vocab_size: int, seed: int = 7) -> Batch:
    """A deterministic (inputs, targets) batch of skewed ids, like text (few frequent tokens).

    Targets are the inputs shifted by one position, as in language-model training.
    """
    if batch_size < 1 or seq_len < 1 or vocab_size < 2:
        raise ConfigError(
            f"synthetic_batch: expected batch_size, seq_len >= 1 and vocab_size >= 2, got "
            f"{batch_size}, {seq_len}, {vocab_size}"
        )
    state, ids = seed, []
    for _ in range(batch_size * seq_len + 1):
        state = (state * 1103515245 + 12345) % (1 << 31)
        u = state / (1 << 31)
        ids.append(min(vocab_size - 1, int(vocab_size * u * u * u)))
    return array("i", ids[:-1]), array("i", ids[1:])


def nano_backend(device: Device, vocab_size: int = NANO_VOCAB) -> GpuBackend:
    """The nano model at (B 4, L 128) in its training backend, holding its seed-0 initial
    weights."""
    cfg = nano_config(vocab_size)
    train = TrainConfig(batch_size=NANO_BATCH, seq_len=NANO_SEQ_LEN, lr=BENCH_LR)
    backend = GpuBackend(device, cfg, NANO_BATCH, NANO_SEQ_LEN, train)
    backend.model.load_params(init_params(cfg, 0))
    return backend


# -- the training step's breakdown -----------------------------------------------------------
def step_groups(backend: GpuBackend) -> dict[str, dict[str, list[Dispatch]]]:
    """The dispatches of one training step, grouped by phase and by kernel family.

    Returns:
        ``{"phase": {name: dispatches}, "family": {shader: dispatches}}``, each group in
        plan order. Phases: zero grads, forward, loss, backward, optimizer (clip + AdamW);
        a family is the WGSL file a dispatch runs (``matmul``, ``selective_scan``, ...).
    """
    model = backend.model
    step = model.step_plan.dispatches
    first_ce = next(i for i, d in enumerate(step) if d is model.ce_dispatches[0])
    after_ce = first_ce + len(model.ce_dispatches)
    phases = {
        "zero grads": list(model.zero_plan.dispatches),
        "forward": step[:first_ce],
        "loss (softmax cross-entropy)": step[first_ce:after_ce],
        "backward": step[after_ce:],
        "optimizer (clip + AdamW)": list(backend.opt_plan.dispatches),
    }
    families: dict[str, list[Dispatch]] = {}
    for dispatches in phases.values():
        for d in dispatches:
            families.setdefault(d.kernel.shader, []).append(d)
    return {"phase": phases, "family": families}


async def step_breakdown(device: Device, quick: bool = False) -> list[dict[str, Any]]:
    """Times the nano model's training step whole, then each kernel family and each phase.

    Each group runs as one submit of its dispatches (in plan order, other groups skipped)
    followed by a sync. ``net_ms`` is ``ms`` minus the empty submit + sync round trip;
    ``share`` is a group's ``net_ms`` over the sum of its kind's ``net_ms`` (families sum
    to 1, phases sum to 1).

    Args:
        device: The GPU device.
        quick: Fewer repeats.

    Returns:
        Rows ``{"group": "step" | "sync" | "family" | "phase", "name", "dispatches", "ms",
        "net_ms", "share", "shape"}``.
    """
    repeats = 2 if quick else 5
    backend = nano_backend(device)
    # The warm-up step compiles every pipeline, so the groups below need no warm-up runs.
    await backend.train_step([synthetic_batch(NANO_BATCH, NANO_SEQ_LEN, NANO_VOCAB)], BENCH_LR, 1)
    groups = step_groups(backend)
    sync_ms = await median_ms(device, [], 15)  # many repeats: every row subtracts it
    timed: list[tuple[str, str, list[Dispatch]]] = [
        ("step", "training step (one submit)", [d for ds in groups["phase"].values() for d in ds]),
    ]
    timed += [(kind, name, ds) for kind in ("family", "phase") for name, ds in groups[kind].items()]
    # Round-robin over the groups, so that a change in the machine's load touches them all.
    samples: list[list[float]] = [[] for _ in timed]
    for _ in range(repeats):
        for index, (_, _, dispatches) in enumerate(timed):
            samples[index].append(await median_ms(device, dispatches, 1, warm_up=False))
    ms = [statistics.median(s) for s in samples]
    totals: dict[str, float] = {}
    for (kind, _, _), value in zip(timed, ms, strict=True):
        totals[kind] = totals.get(kind, 0.0) + max(0.0, value - sync_ms)
    shape = f"nano B{NANO_BATCH} L{NANO_SEQ_LEN} V{NANO_VOCAB}"
    rows = [_share_row("sync", "empty submit + readback", 0, sync_ms, sync_ms, 0.0, shape)]
    for (kind, name, dispatches), value in zip(timed, ms, strict=True):
        share = 1.0 if kind == "step" else max(0.0, value - sync_ms) / (totals[kind] or 1.0)
        rows.append(_share_row(kind, name, len(dispatches), value, sync_ms, share, shape))
    order = {"sync": 0, "step": 1, "family": 2, "phase": 3}
    rows.sort(key=lambda row: (order[row["group"]], -row["ms"]))
    for row in rows:
        log.info("step_breakdown: %s", row)
    return rows


def _share_row(
    group: str, name: str, count: int, ms: float, sync_ms: float, share: float, shape: str
) -> dict[str, Any]:
    return {
        "group": group,
        "name": name,
        "dispatches": count,
        "ms": round(ms, 3),
        "net_ms": round(max(0.0, ms - sync_ms), 3),
        "share": round(share, 4),
        "shape": shape,
    }


# -- the model's speeds ----------------------------------------------------------------------
async def gpu_model_bench(device: Device, quick: bool = False) -> list[dict[str, Any]]:
    """Training / forward / generation tokens/s and 64-token embedding latency on ``device``.

    The nano model (B 4, L 128, vocab 2048) from its seed-0 weights: one warm-up step, then
    a few real training steps (zero grads, forward, loss, backward, clip, AdamW, loss read
    back); forward = the evaluation plan (forward + loss, no stored states); generation =
    greedy recurrent decoding, one plan replay and one logits readback per token; embedding
    = one 64-token text through :class:`GpuEmbedder` (batch 1).

    Returns:
        Rows ``{"metric", "value", "unit", "detail"}``; metrics ``train_tokens_per_s``,
        ``forward_tokens_per_s``, ``generate_tokens_per_s``, ``embed_64_ms``.
    """
    steps, forwards, new_tokens, embeds = (2, 3, 16, 3) if quick else (5, 8, 64, 7)
    backend = nano_backend(device)
    model = backend.model
    batch = synthetic_batch(NANO_BATCH, NANO_SEQ_LEN, NANO_VOCAB)
    tokens = NANO_BATCH * NANO_SEQ_LEN
    await backend.train_step([batch], BENCH_LR, 1)  # warm-up: first-use costs
    start = time.perf_counter()
    for step in range(2, steps + 2):
        await backend.train_step([batch], BENCH_LR, step)
    train_s = time.perf_counter() - start

    await model.eval_batch(batch)
    start = time.perf_counter()
    for _ in range(forwards):
        await model.eval_batch(batch)
    forward_s = time.perf_counter() - start

    decoder = GpuDecoder(device, model.config, model.slots)
    decoder.reset()
    rng = random.Random(0)  # unused: temperature 0 is greedy
    logits = await decoder.step(batch[0][0])
    logits = await decoder.step(sample(logits, 0.0, None, None, rng))  # warm-up
    start = time.perf_counter()
    for _ in range(new_tokens):
        logits = await decoder.step(sample(logits, 0.0, None, None, rng))
    generate_s = time.perf_counter() - start

    embedder = GpuEmbedder(device, model.config, model.slots, 1, EMBED_TOKENS)
    text = list(batch[0][:EMBED_TOKENS])
    embed_ms = await median_call_ms(lambda: embedder.embed_ids([text]), embeds)
    shape = f"nano B{NANO_BATCH} L{NANO_SEQ_LEN} V{NANO_VOCAB}"
    return [
        _metric("train_tokens_per_s", steps * tokens / train_s, "tok/s", f"{shape}, {steps} steps"),
        _metric("forward_tokens_per_s", forwards * tokens / forward_s, "tok/s", f"{shape}, + loss"),
        _metric(
            "generate_tokens_per_s",
            new_tokens / generate_s,
            "tok/s",
            f"greedy, {new_tokens} tokens, one readback each",
        ),
        _metric("embed_64_ms", embed_ms, "ms", f"one {EMBED_TOKENS}-token text, median"),
    ]


def _metric(metric: str, value: float, unit: str, detail: str) -> dict[str, Any]:
    return {"metric": metric, "value": round(value, 3), "unit": unit, "detail": detail}


# -- one config, trained and scored (the block comparison) ----------------------------------
async def train_and_measure(
    backend: Backend, train_ids: array[int], held_ids: array[int], train: TrainConfig
) -> dict[str, Any]:
    """Trains ``backend`` for ``train.steps`` steps, then scores the held-out slice.

    The batches are :class:`~evermind.train.loop.Trainer`'s (seeded by ``train.seed``), so two
    backends given the same stream and settings see the same tokens in the same order; the
    held-out loss is :meth:`Trainer.evaluate` (the first ``train.eval_batches`` windows of
    ``held_ids``). ``tokens_per_s`` leaves out the first step (pipeline compilation and
    first-use costs) when there is more than one.

    Returns:
        ``{"steps", "tokens", "held_out_loss", "final_loss", "tokens_per_s", "seconds"}``.
    """
    events: list[Progress] = []  # [first step, last step]

    def on_progress(event: Progress) -> None:
        events[min(len(events), 1) :] = [event]

    trainer = Trainer(backend, train_ids, held_ids, train, on_progress=on_progress)
    result = await trainer.run()
    held = await trainer.evaluate()
    seconds = events[-1].elapsed_s if events else 0.0
    rate = trainer.tokens_per_second
    if len(events) == 2 and seconds > events[0].elapsed_s:
        rate = (events[1].tokens - events[0].tokens) / (seconds - events[0].elapsed_s)
    return {
        "steps": result.steps,
        "tokens": result.tokens,
        "held_out_loss": None if held is None else round(held, 4),
        "final_loss": round(result.final_loss, 4),
        "tokens_per_s": round(rate, 1),
        "seconds": round(seconds, 2),
    }


async def gpu_block_bench(
    device: Device,
    config: dict[str, Any],
    train_ids: list[int],
    held_ids: list[int],
    train: dict[str, Any],
    seed: int = 0,
) -> dict[str, Any]:
    """One model config trained on :class:`GpuBackend` and scored (:func:`train_and_measure`).

    Args:
        device: The GPU device.
        config: :class:`MambaConfig` keyword arguments (plain data, so the tab can take it).
        train_ids: The training token stream.
        held_ids: The held-out token stream.
        train: :class:`TrainConfig` keyword arguments.
        seed: Seeds the initial weights (:func:`init_params`).

    Returns:
        ``{"supported": True, "transport", "adapter", **train_and_measure}``, or
        ``{"supported": False, "transport", "adapter", "error"}`` when the GPU model refuses
        the config (a block without WebGPU kernels raises :class:`ConfigError`).
    """
    cfg, settings = MambaConfig(**config), TrainConfig(**train)
    where = {"transport": device.transport, "adapter": adapter_name(device)}
    try:
        backend = GpuBackend(device, cfg, settings.batch_size, settings.seq_len, settings)
    except ConfigError as err:
        return {"supported": False, **where, "error": str(err)}
    backend.model.load_params(init_params(cfg, seed))
    measured = await train_and_measure(
        backend, array("i", train_ids), array("i", held_ids), settings
    )
    return {"supported": True, **where, **measured}


# -- the suites the CLI and the Studio call --------------------------------------------------
async def run_kernel_suite(
    quick: bool = False, device: Device | None = None, step: bool = True
) -> dict[str, Any]:
    """The kernel rows and (with ``step``) the training step's breakdown on one transport.

    Returns:
        ``{"transport", "adapter", "kernels": [...], "step": [...]}``.
    """
    dev = device or await gpu.open_device()
    return {
        "transport": dev.transport,
        "adapter": adapter_name(dev),
        "kernels": await run_kernel_bench(quick, dev),
        "step": await step_breakdown(dev, quick) if step else [],
    }


async def run_model_suite(quick: bool = False, device: Device | None = None) -> dict[str, Any]:
    """The GPU model's speeds on one transport: ``{"transport", "adapter", "rows"}``."""
    dev = device or await gpu.open_device()
    return {
        "transport": dev.transport,
        "adapter": adapter_name(dev),
        "rows": await gpu_model_bench(dev, quick),
    }
