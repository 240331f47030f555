"""The Studio worker's benchmark calls: the kernel suite, the model's speeds and the block
comparison's training runs in the tab.

Browser-safe. ``evermind bench kernels|train`` boots the bundle in headless Chromium and
calls these through ``window.evermind.call``, so the same :mod:`evermind.studio.bench` code
runs on ``navigator.gpu`` as on native wgpu-py, in one CLI run. Registered on the worker's
handler table through this module's ``router``, which :mod:`evermind.studio.api` merges.
"""

from __future__ import annotations

from typing import Any

from evermind import gpu
from evermind.studio.bench import suite
from evermind.studio.rpc import Router, emit

router = Router()
handler = router.handler


@handler
async def bench_kernels(quick: bool = False, step: bool = True) -> dict[str, Any]:
    """Times every kernel, then (with ``step``) the nano training step by kernel family.

    Returns:
        ``{"transport", "adapter", "kernels": [rows], "step": [rows]}`` as
        :func:`evermind.studio.bench.suite.run_kernel_suite` describes.
    """
    emit("bench-progress", message="Timing the kernels…")
    return await suite.run_kernel_suite(bool(quick), await gpu.open_device(), bool(step))


@handler
async def bench_train(quick: bool = False) -> dict[str, Any]:
    """The nano model's training, forward and generation tokens/s and embedding latency.

    Returns:
        ``{"transport", "adapter", "rows": [{"metric", "value", "unit", "detail"}]}``.
    """
    emit("bench-progress", message="Timing the model…")
    return await suite.run_model_suite(bool(quick), await gpu.open_device())


@handler
async def bench_blocks(
    config: dict[str, Any],
    train_ids: list[int],
    held_ids: list[int],
    train: dict[str, Any],
    seed: int = 0,
) -> dict[str, Any]:
    """Trains one model config on the tab's WebGPU and scores it (``benchmarks/blocks.py``).

    Returns:
        What :func:`evermind.studio.bench.suite.gpu_block_bench` returns.
    """
    emit("bench-progress", message=f"Training a {config.get('block', 'mamba1')} model…")
    return await suite.gpu_block_bench(
        await gpu.open_device(), dict(config), list(train_ids), list(held_ids), dict(train), seed
    )
