"""Batched recurrent decoding: tokens/s of the wgpu-py and numpy Decoders at several batch sizes.

For the nano preset (d_model 128, 4 layers, vocab 2048; seed-0 weights) it prefills ``B``
prompts of ``--prompt`` tokens into ``B`` slots, then times ``--steps`` batched steps of all
``B`` sequences (one :meth:`Decoder.step` each: on the GPU one plan replay and one (B, vocab)
readback), best of ``--repeats``. Rows: backend, batch, prefill ms, step ms, tokens/s (B x
steps / time). Run as ``python -m benchmarks.gpu_decode [--quick] [--json]``.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from collections.abc import Sequence
from typing import Any

import numpy as np

from evermind.model.config import MambaConfig
from evermind.model.cpu import CpuMamba
from evermind.model.cpu_decode import CpuDecoder
from evermind.model.decode import Decoder
from evermind.model.gpu_decode import GpuBatchDecoder
from evermind.model.init import init_params


def bench_decoder(
    decoder: Decoder, batch: int, prompt: int, steps: int, repeats: int, vocab: int
) -> dict[str, float]:
    """Prefill and step times of ``batch`` sequences (best of ``repeats``)."""
    rng = np.random.default_rng(batch)
    slots = list(range(batch))
    prompts = rng.integers(0, vocab, (batch, prompt)).tolist()
    best_prefill = best_steps = float("inf")
    for _ in range(repeats):
        start = time.perf_counter()
        logits = decoder.prefill(slots, prompts)
        best_prefill = min(best_prefill, time.perf_counter() - start)
        tokens = np.argmax(np.asarray(logits), axis=1).tolist()
        start = time.perf_counter()
        for _ in range(steps):
            logits = decoder.step(slots, tokens)
            tokens = np.argmax(np.asarray(logits), axis=1).tolist()  # greedy, as served
        best_steps = min(best_steps, time.perf_counter() - start)
        for slot in slots:
            decoder.release(slot)
    return {
        "prefill_ms": round(best_prefill * 1e3, 2),
        "step_ms": round(best_steps / steps * 1e3, 3),
        "tokens_per_s": round(batch * steps / best_steps, 1),
    }


def run(quick: bool, batches: Sequence[int], cpu: bool = True) -> dict[str, Any]:
    """Runs every (backend, batch) cell; returns ``{"adapter", "config", "rows"}``."""
    from evermind.gpu.native import open_native_device

    config = (
        MambaConfig(d_model=32, n_layer=2, vocab_size=256)
        if quick
        else MambaConfig.preset("nano", 2048)
    )
    prompt, steps, repeats = (4, 4, 1) if quick else (64, 64, 3)
    params = init_params(config, 0)
    device = open_native_device()
    slots = max(batches)
    backends: dict[str, Decoder] = {
        "wgpu-py": GpuBatchDecoder.from_params(device, config, params, slots)
    }
    if cpu:
        backends["numpy"] = CpuDecoder(CpuMamba(config, params), slots)
    rows = []
    for name, decoder in backends.items():
        bench_decoder(decoder, 1, 2, 1, 1, config.vocab_size)  # warm-up: record, compile
        for batch in batches:
            cell = bench_decoder(decoder, batch, prompt, steps, repeats, config.vocab_size)
            rows.append({"backend": name, "batch": batch, **cell})
    info = device.adapter_info
    return {
        "adapter": f"{info.get('device') or info.get('description')} ({info.get('backend')})",
        "cpu_adapter": device.is_cpu_adapter,
        "config": {
            "d_model": config.d_model,
            "n_layer": config.n_layer,
            "vocab": config.vocab_size,
        },
        "prompt_tokens": prompt,
        "steps": steps,
        "rows": rows,
    }


def main(argv: Sequence[str] | None = None) -> int:
    """``python -m benchmarks.gpu_decode``."""
    parser = argparse.ArgumentParser(prog="python -m benchmarks.gpu_decode", description=__doc__)
    parser.add_argument("--quick", action="store_true", help="a tiny model, few steps")
    parser.add_argument("--batches", default="", help="comma-separated batch sizes")
    parser.add_argument("--no-cpu", action="store_true", help="skip the numpy decoder")
    parser.add_argument("--json", action="store_true", help="print JSON instead of a table")
    args = parser.parse_args(argv)
    batches = [int(b) for b in args.batches.split(",")] if args.batches else []
    batches = batches or ([1, 4] if args.quick else [1, 8, 32])
    doc = run(args.quick, batches, cpu=not args.no_cpu)
    if args.json:
        print(json.dumps(doc))
        return 0
    print(f"batched decoding on {doc['adapter']}, {doc['config']}")
    print("| backend | batch | prefill ms | step ms | tok/s |\n| --- | ---: | ---: | ---: | ---: |")
    for r in doc["rows"]:
        print(
            f"| {r['backend']} | {r['batch']} | {r['prefill_ms']} | {r['step_ms']} | "
            f"{r['tokens_per_s']} |"
        )
    return 0


if __name__ == "__main__":
    sys.exit(main())
