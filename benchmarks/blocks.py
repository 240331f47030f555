"""Block types at equal parameter count and equal training tokens: held-out loss and training
tokens/s per transport, in one run (native-only). Run as ``python -m benchmarks.blocks``.

The question (issue 21): which block should the default preset use? Every entry of
:data:`ENTRIES` is one block type; :func:`pick_configs` gives each the shape whose parameter
count is nearest the anchor's (the Mamba-1 ``nano`` preset, the default model) and refuses
one that cannot come within :data:`TOLERANCE`. Each picked config then trains from the same
initial-weight seed on the same token stream, with the same batches in the same order
(``Trainer``'s seeded sampler), for ``--steps`` steps of 4 x 128 tokens, and is scored on the
same held-out slice: the first ``eval_batches`` windows of the held-out tail of the default
corpus, prepared as ``evermind train`` prepares it (:func:`evermind.job.default_corpus`,
a byte-level BPE of ``JobConfig.vocab_size`` tokens trained on it, the tail
``JobConfig.held_out`` held out).

Transports (columns):

- ``cpu``: the numpy model with AdamW (:class:`~evermind.train.cpu_backend.CpuBackend`);
- ``native``: :class:`~evermind.train.gpu_backend.GpuBackend` on wgpu-py (whatever adapter it opens;
  a block without WebGPU kernels reads "not supported yet");
- ``browser``: the same :func:`evermind.studio.bench.suite.gpu_block_bench` in the Studio's
  worker in headless Chromium (the ``bench_blocks`` worker call; SwiftShader where there is no
  GPU).

Training tokens/s leave out the first step (compilation, first-use costs). Nothing is
asserted: ``tests/unit/test_bench_blocks.py`` checks the config picker only.

Adding a block: one :class:`BlockEntry` in :data:`ENTRIES` (its fixed ``MambaConfig``
fields and the fields searched to match the anchor's count); nothing else changes.
"""

from __future__ import annotations

import argparse
import asyncio
import itertools
import json
import logging
import os
import sys
import time
from array import array
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from evermind.errors import ConfigError, EvermindError
from evermind.model.config import PRESETS, MambaConfig

log = logging.getLogger(__name__)

#: How far a picked config's parameter count may be from the anchor's (relative).
TOLERANCE = 0.03
#: Every transport a run may measure, in column order.
TRANSPORTS = ("cpu", "native", "browser")
#: Said in a cell whose transport refuses the block (no kernels for it yet).
NOT_SUPPORTED = "not supported yet"


@dataclass(frozen=True)
class BlockEntry:
    """One block type of the comparison.

    Attributes:
        name: The row's name.
        fixed: ``MambaConfig`` keyword arguments held as given (``block`` among them).
        search: ``MambaConfig`` keyword arguments searched, each over its candidate values
            (in order of preference: the first of equally near shapes wins); empty for the
            anchor.
        note: What the shape is, in words (shown under the table).
    """

    name: str
    fixed: Mapping[str, Any]
    search: Mapping[str, Sequence[int]] = field(default_factory=dict)
    note: str = ""


#: The anchor: the default model (Mamba-1, the nano preset). Every other entry matches its
#: parameter count.
ANCHOR = BlockEntry(
    "mamba1",
    {"block": "mamba1", **PRESETS["nano"]},
    note="the nano preset (d_state 16, expand 2)",
)

#: The block types compared, the anchor first. One data structure: a new block type is one
#: more entry here.
ENTRIES: tuple[BlockEntry, ...] = (
    ANCHOR,
    BlockEntry(
        "mamba2",
        # d_state 64: the SSD block's scalar decay per head makes a larger state cheap (HF's
        # default is 128); one group of B/C; chunks of 64 (two per 128-token window).
        {"block": "mamba2", "d_state": 64, "n_groups": 1, "chunk_size": 64, "expand": 2},
        {
            "d_model": tuple(range(128, 48, -16)) + tuple(range(144, 272, 16)),
            "n_layer": (4, 3, 5, 6, 2, 7, 8),
            "head_dim": (64, 32, 16),
        },
        note="d_state 64, one group, chunks of 64",
    ),
    BlockEntry(
        "mamba1+moe",
        # The cortex (model/config_moe.py): after every Mamba-1 mixer a Qwen2-MoE block of 4
        # routed SwiGLU experts, 2 per token, plus the gated shared expert. The width stays the
        # anchor's (d_model 128); one Mamba layer gives way to the cortex, and the experts'
        # widths are searched, so that the total (not the active) parameter count matches.
        {"block": "mamba1", "d_model": 128, "moe_experts": 4, "moe_top_k": 2, "moe_every": 1},
        {
            "n_layer": (3, 2),
            "moe_intermediate": (32, 16, 48, 64),
            "moe_shared_intermediate": (32, 16, 48, 64, 96, 128),
        },
        note="4 routed experts, top-2, a shared expert, after every mixer",
    ),
)


@dataclass(frozen=True)
class Picked:
    """One entry's config, matched to the anchor.

    Attributes:
        name: The entry's name.
        kwargs: Every ``MambaConfig`` keyword argument but the token ids and vocabulary.
        n_params: Its parameter count.
        gap: ``n_params / anchor's - 1``.
        note: The entry's note.
    """

    name: str
    kwargs: dict[str, Any]
    n_params: int
    gap: float
    note: str

    def config(self, vocab_size: int, **ids: Any) -> MambaConfig:
        """The config at ``vocab_size`` with the tokenizer's special ids."""
        return MambaConfig(**self.kwargs, vocab_size=vocab_size, **ids)


def _candidates(entry: BlockEntry) -> Iterable[dict[str, Any]]:
    names = list(entry.search)
    for values in itertools.product(*(entry.search[n] for n in names)):
        yield {**entry.fixed, **dict(zip(names, values, strict=True))}


def pick_configs(
    vocab_size: int,
    entries: Sequence[BlockEntry] = ENTRIES,
    tolerance: float = TOLERANCE,
) -> list[Picked]:
    """Each entry's shape nearest the first entry's (the anchor's) parameter count.

    Args:
        vocab_size: The vocabulary (the embedding, tied to the LM head, counts in every
            model).
        entries: The anchor first, then the entries matched to it.
        tolerance: The largest relative gap accepted.

    Returns:
        One :class:`Picked` per entry, in order.

    Raises:
        ConfigError: No valid shape of an entry comes within ``tolerance`` (the message gives
            the nearest), or the anchor searches fields.
    """
    anchor = entries[0]
    if anchor.search:
        raise ConfigError(
            f"pick_configs: the anchor {anchor.name!r} searches {sorted(anchor.search)}; "
            "expected a fixed config (the count the others match)"
        )
    target = MambaConfig(**anchor.fixed, vocab_size=vocab_size).n_params
    picked = [Picked(anchor.name, dict(anchor.fixed), target, 0.0, anchor.note)]
    for entry in entries[1:]:
        best: tuple[float, dict[str, Any], int] | None = None
        for kwargs in _candidates(entry):
            try:
                count = MambaConfig(**kwargs, vocab_size=vocab_size).n_params
            except ConfigError:  # e.g. a head_dim that does not divide d_inner
                continue
            gap = count / target - 1
            if best is None or abs(gap) < abs(best[0]):
                best = (gap, kwargs, count)
        if best is None or abs(best[0]) > tolerance:
            nearest = "none valid" if best is None else f"{best[2]:,} ({best[0]:+.1%}, {best[1]})"
            raise ConfigError(
                f"pick_configs: no shape of {entry.name!r} within {tolerance:.0%} of "
                f"{target:,} parameters; nearest: {nearest}; hint: widen its search"
            )
        picked.append(Picked(entry.name, best[1], best[2], best[0], entry.note))
    return picked


# -- the data ---------------------------------------------------------------------------------
@dataclass
class Data:
    """The default corpus as ``evermind train`` prepares it."""

    description: str
    vocab_size: int
    ids: dict[str, int]
    train_ids: array[int]
    held_ids: array[int]


def prepare_data(corpus_bytes: int) -> Data:
    """The default corpus, its tokenizer, and the (train, held-out) token streams."""
    from evermind.job import JobConfig, default_corpus, split, tokenize, train_tokenizer

    job = JobConfig()
    text, description = default_corpus(corpus_bytes)
    tokenizer = train_tokenizer(text, job.vocab_size)
    train_ids, held_ids = split(job, tokenize(tokenizer, text))
    eos = tokenizer.eos_id or 0
    ids = {
        "eos_token_id": eos,
        "bos_token_id": tokenizer.bos_id if tokenizer.bos_id is not None else eos,
        "pad_token_id": tokenizer.pad_id if tokenizer.pad_id is not None else eos,
    }
    return Data(description, tokenizer.vocab_size, ids, train_ids, held_ids)


def train_settings(steps: int, eval_batches: int, seed: int) -> dict[str, Any]:
    """``TrainConfig`` keyword arguments of every run (the job's defaults, shorter)."""
    from evermind.types import TrainConfig

    default = TrainConfig()
    return {
        "steps": steps,
        "batch_size": default.batch_size,
        "seq_len": default.seq_len,
        "lr": default.lr,
        "min_lr": default.min_lr,
        "warmup_steps": min(default.warmup_steps, max(1, steps // 10)),
        "eval_every": 0,  # scored once, after the last step (train_and_measure)
        "eval_batches": eval_batches,
        "seed": seed,
    }


def held_out_tokens(held_ids: array[int], train: dict[str, Any]) -> int:
    """How many held-out tokens every run is scored on (the trainer's evaluation windows)."""
    from evermind.train.data import eval_windows

    windows = eval_windows(held_ids, train["batch_size"], train["seq_len"], train["eval_batches"])
    return len(windows) * int(train["batch_size"]) * int(train["seq_len"])


# -- the transports ---------------------------------------------------------------------------
def run_cpu(picked: Picked, data: Data, train: dict[str, Any], seed: int) -> dict[str, Any]:
    """One config on the numpy CPU model."""
    from evermind.model.init import init_params
    from evermind.studio.bench.suite import train_and_measure
    from evermind.train.cpu_backend import CpuBackend
    from evermind.types import TrainConfig

    config, settings = picked.config(data.vocab_size, **data.ids), TrainConfig(**train)
    backend = CpuBackend(config, init_params(config, seed), settings)
    measured = asyncio.run(train_and_measure(backend, data.train_ids, data.held_ids, settings))
    return {"supported": True, "adapter": "numpy", **measured}


def run_native(picked: Picked, data: Data, train: dict[str, Any], seed: int) -> dict[str, Any]:
    """One config on wgpu-py (:func:`gpu_block_bench`)."""
    from evermind import gpu
    from evermind.studio.bench.suite import gpu_block_bench

    async def go() -> dict[str, Any]:
        device = await gpu.open_device()
        config = {**picked.kwargs, "vocab_size": data.vocab_size, **data.ids}
        return await gpu_block_bench(
            device, config, list(data.train_ids), list(data.held_ids), train, seed
        )

    return asyncio.run(go())


def run_browser(
    picked: Sequence[Picked], data: Data, train: dict[str, Any], seed: int, bundle: Path
) -> list[dict[str, Any]]:
    """Every config in the Studio worker, one page boot (the ``bench_blocks`` call)."""
    from benchmarks import host

    calls = [
        (
            "bench_blocks",
            {
                "config": {**p.kwargs, "vocab_size": data.vocab_size, **data.ids},
                "train_ids": list(data.train_ids),
                "held_ids": list(data.held_ids),
                "train": train,
                "seed": seed,
            },
        )
        for p in picked
    ]
    return host.run_in_browser(bundle, calls)


def collect(
    steps: int,
    transports: Sequence[str],
    corpus_bytes: int,
    eval_batches: int = 8,
    seed: int = 0,
    bundle: Path | None = None,
) -> dict[str, Any]:
    """Every cell of the table as plain data.

    Returns:
        ``{"corpus", "train_tokens", "held_out_tokens", "settings", "configs": [...],
        "cells": [{"block", "transport", ...}], "errors": [...]}``; a transport that fails
        as a whole adds its message to ``errors`` and the others still run.
    """
    started = time.perf_counter()
    data = prepare_data(corpus_bytes)
    picked = pick_configs(data.vocab_size)
    train = train_settings(steps, eval_batches, seed)
    log.info("blocks: %s, %d configs, %s", data.description, len(picked), list(transports))
    cells: list[dict[str, Any]] = []
    errors: list[str] = []
    for transport in transports:
        try:
            if transport == "browser":
                if bundle is None:
                    raise EvermindError("the browser run needs a built bundle (dist/web)")
                results = run_browser(picked, data, train, seed, bundle)
            else:
                run = run_cpu if transport == "cpu" else run_native
                results = [run(p, data, train, seed) for p in picked]
        except EvermindError as err:
            errors.append(f"{transport}: {err}")
            continue
        for p, result in zip(picked, results, strict=True):
            # result's own "transport" is the device's ("wgpu-py", "browser"): kept as "device"
            device = result.pop("transport", transport)
            cells.append({"block": p.name, "transport": transport, "device": device, **result})
    return {
        "corpus": data.description,
        "vocab_size": data.vocab_size,
        "train_tokens": len(data.train_ids),
        "held_out_tokens": held_out_tokens(data.held_ids, train),
        "settings": train,
        "configs": [
            {
                "block": p.name,
                "config": p.kwargs,
                "n_params": p.n_params,
                "gap": round(p.gap, 5),
                "note": p.note,
            }
            for p in picked
        ],
        "cells": cells,
        "errors": errors,
        "seconds": round(time.perf_counter() - started, 1),
    }


def _cell(doc: dict[str, Any], block: str, transport: str) -> tuple[str, str]:
    for cell in doc["cells"]:
        if cell["block"] == block and cell["transport"] == transport:
            if not cell.get("supported", True):
                return NOT_SUPPORTED, NOT_SUPPORTED
            loss = cell.get("held_out_loss")
            return ("" if loss is None else f"{loss:.4f}"), f"{cell['tokens_per_s']:,.0f}"
    return "-", "-"


def format_table(doc: dict[str, Any], transports: Sequence[str]) -> list[str]:
    """The markdown table: one row per block, held-out loss and tokens/s per transport."""
    s = doc["settings"]
    tokens = s["steps"] * s["batch_size"] * s["seq_len"]
    lines = [
        f"Blocks at equal parameter count: {doc['corpus']}, vocab {doc['vocab_size']}; "
        f"{s['steps']} steps x {s['batch_size']} x {s['seq_len']} = {tokens:,} training "
        f"tokens each; held-out loss on the same {doc['held_out_tokens']:,}-token slice "
        "(nats/token); tokens/s after the first step.",
        "",
    ]
    head = ["block", "params", "gap"]
    for t in transports:
        head += [f"{t} loss", f"{t} tok/s"]
    lines += ["| " + " | ".join(head) + " |", "|" + " --- |" * len(head)]
    for c in doc["configs"]:
        row = [c["block"], f"{c['n_params']:,}", f"{c['gap']:+.2%}"]
        for t in transports:
            row += list(_cell(doc, c["block"], t))
        lines.append("| " + " | ".join(row) + " |")
    lines.append("")
    for c in doc["configs"]:
        shape = ", ".join(f"{k} {v}" for k, v in c["config"].items() if k != "block")
        lines.append(f"- {c['block']}: {shape} ({c['note']})")
    adapters = sorted(
        {
            f"{cell['transport']}: {cell['device']}, {cell.get('adapter')}"
            for cell in doc["cells"]
            if cell.get("adapter")
        }
    )
    if adapters:
        lines.append("- adapters: " + "; ".join(adapters))
    for error in doc["errors"]:
        lines.append(f"- error: {error}")
    return lines


def main(argv: list[str] | None = None) -> int:
    """Parses the options, measures, prints; 1 when a transport failed as a whole."""
    parser = argparse.ArgumentParser(prog="python -m benchmarks.blocks", description=__doc__)
    parser.add_argument("--steps", type=int, default=60, help="training steps per run")
    parser.add_argument(
        "--transports",
        default=",".join(TRANSPORTS),
        help=f"comma-separated, from {','.join(TRANSPORTS)}",
    )
    parser.add_argument(
        "--corpus-bytes", type=int, default=1_000_000, help="bytes of the default corpus"
    )
    parser.add_argument("--eval-batches", type=int, default=8, help="held-out windows of 4x128")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--dir", help="the built Studio bundle (default dist/web, built if stale)")
    parser.add_argument("--json", action="store_true", help="print the raw JSON document")
    args = parser.parse_args(argv)
    transports = [t for t in args.transports.split(",") if t]
    unknown = sorted(set(transports) - set(TRANSPORTS))
    if unknown or not transports:
        parser.error(f"--transports: unknown {unknown}; choose from {', '.join(TRANSPORTS)}")
    if args.steps < 1:
        parser.error(f"--steps must be >= 1, got {args.steps}")
    # This module's progress lines only (the browser run logs every call's arguments: the
    # whole token stream).
    logging.basicConfig(level=logging.WARNING, stream=sys.stderr, format="%(message)s")
    log.setLevel(logging.INFO)
    bundle = None
    if "browser" in transports:
        from evermind.studio.bundle import ensure_bundle

        # The build's progress lines go to stderr so that --json prints JSON alone.
        sys.stdout.flush()
        saved = os.dup(1)
        os.dup2(2, 1)
        try:
            bundle = ensure_bundle(Path(args.dir) if args.dir else None)
        finally:
            os.dup2(saved, 1)
            os.close(saved)
    doc = collect(args.steps, transports, args.corpus_bytes, args.eval_batches, args.seed, bundle)
    print(json.dumps(doc) if args.json else "\n".join(format_table(doc, transports)))
    return 1 if doc["errors"] else 0


if __name__ == "__main__":
    sys.exit(main())
