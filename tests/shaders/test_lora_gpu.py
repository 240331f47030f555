"""LoRA on the GPU (evermind.train.lora_gpu.GpuLoraBackend) against the one reference, the
numpy :class:`~evermind.train.lora.LoraBackend`: the same steps give the same losses and the
same A and B, for Mamba-1 (every projection, dt_proj too) and Mamba-2 (in_proj and out_proj,
whose GPU slots split the rows five ways); evaluation, the optimiser state's round trip, and
the base weights that nothing may write."""

from __future__ import annotations

import asyncio

import numpy as np
import pytest

from evermind.errors import ConfigError
from evermind.model.config import MambaConfig
from evermind.model.init import init_params
from evermind.train.lora import LoraAdapter, LoraBackend, LoraConfig, block_targets, init_adapter
from evermind.train.lora_gpu import GpuLoraBackend
from evermind.types import TrainConfig
from tests.factories import next_token_batch
from tests.numerics import assert_close

MAMBA1 = MambaConfig(d_model=20, n_layer=2, vocab_size=37, d_state=5, d_conv=4)
MAMBA2 = MambaConfig(
    d_model=20, n_layer=2, vocab_size=37, d_state=5, d_conv=4, block="mamba2", head_dim=10,
    n_groups=2, chunk_size=4,
)  # fmt: skip
B, L = 2, 9
CASES = {
    "mamba1": (MAMBA1, ("in_proj", "x_proj", "dt_proj", "out_proj")),
    "mamba2": (MAMBA2, None),
}


def _adapter(config: MambaConfig, targets: tuple[str, ...] | None) -> LoraAdapter:
    """A rank-2 adapter whose B is not zero, so that A's gradient is not zero from step 1."""
    lora = LoraConfig(rank=2, alpha=5.0, targets=block_targets(config, targets), seed=4)
    adapter = init_adapter(config, lora, "sha256:test")
    rng = np.random.default_rng(9)
    for value in adapter.B.values():
        value[...] = rng.normal(0.0, 0.05, value.shape).astype(np.float32)
    return adapter


def _train(clip: float) -> TrainConfig:
    return TrainConfig(steps=4, batch_size=B, seq_len=L, lr=2e-2, weight_decay=0.1,
                       grad_clip=clip)  # fmt: skip


@pytest.mark.parametrize("clip", [1.0, 0.02], ids=["unclipped", "clipped"])
@pytest.mark.parametrize("block", list(CASES))
def test_gpu_steps_equal_the_numpy_lora_backend(device, block: str, clip: float) -> None:
    config, targets = CASES[block]
    params = init_params(config, seed=3)
    adapter, train = _adapter(config, targets), _train(clip)
    cpu = LoraBackend(config, params, adapter, train)
    gpu = GpuLoraBackend(device, config, params, adapter, train)
    for step in range(1, 5):
        batch = next_token_batch(config.vocab_size, B, L, step)
        want = asyncio.run(cpu.train_step([batch], 1e-2 * step, step))
        got = asyncio.run(gpu.train_step([batch], 1e-2 * step, step))
        assert got == pytest.approx(want, rel=2e-5), (step, got, want)
    trained, expected = asyncio.run(gpu.read_adapter()), cpu.adapter()
    for name in expected.A:
        assert not np.array_equal(expected.A[name], adapter.A[name])  # A did move
        assert_close(trained.A[name], expected.A[name], atol=2e-5, rtol=1e-4, name=f"A {name}")
        assert_close(trained.B[name], expected.B[name], atol=2e-5, rtol=1e-4, name=f"B {name}")
    held = next_token_batch(config.vocab_size, B, L, 99)
    (want_sum, n), (got_sum, m) = (asyncio.run(b.eval_batch(held)) for b in (cpu, gpu))
    assert n == m and got_sum == pytest.approx(want_sum, rel=2e-5)


def test_state_crosses_backends_and_the_base_stays(device) -> None:
    """Either backend resumes the other's state (same keys, B whole): a step taken after the
    hand-over is the same step on both sides."""
    config, targets = CASES["mamba2"]
    params = init_params(config, seed=3)
    adapter, train = _adapter(config, targets), _train(1.0)
    cpu = LoraBackend(config, params, adapter, train)
    asyncio.run(cpu.train_step([next_token_batch(config.vocab_size, B, L, 1)], 1e-2, 1))
    gpu = GpuLoraBackend(device, config, params, adapter, train)
    asyncio.run(gpu.load_state(asyncio.run(cpu.state())))
    assert asyncio.run(gpu.state()).keys() == asyncio.run(cpu.state()).keys()
    first, handed = cpu.adapter(), asyncio.run(gpu.read_adapter())
    for name in first.A:
        assert np.array_equal(first.A[name], handed.A[name])
        assert np.array_equal(first.B[name], handed.B[name])
    batch = next_token_batch(config.vocab_size, B, L, 2)
    want = asyncio.run(cpu.train_step([batch], 1e-2, 2))  # moments carried across
    assert asyncio.run(gpu.train_step([batch], 1e-2, 2)) == pytest.approx(want, rel=2e-5)
    back = LoraBackend(config, params, adapter, train)
    asyncio.run(back.load_state(asyncio.run(gpu.state())))
    for name, value in back.adapter().B.items():
        assert_close(value, cpu.adapter().B[name], atol=2e-5, rtol=1e-4, name=f"B {name}")
    # The frozen copies are the base's bytes, and untargeted weights are never written.
    served = asyncio.run(gpu.model.read_params())
    for target in gpu.targets:
        for piece in target.pieces:
            raw = asyncio.run(device.read(piece.base, 4 * piece.slot.spec.count))
            start, count = piece.slot.spec.offset, piece.slot.spec.count
            want = np.asarray(params[target.name], np.float32).reshape(-1)[start : start + count]
            assert np.frombuffer(raw, np.float32).tobytes() == want.tobytes()
    for name, value in params.items():
        if name not in first.A:
            assert np.asarray(served[name]).tobytes() == np.asarray(value, np.float32).tobytes()


def test_the_cortex_is_refused(device) -> None:
    config = MambaConfig(d_model=16, n_layer=2, vocab_size=37, d_state=4, moe_experts=2,
                         moe_top_k=1, moe_intermediate=8)  # fmt: skip
    adapter = init_adapter(config, LoraConfig(rank=2), "sha256:test")
    with pytest.raises(ConfigError, match="cortex"):
        GpuLoraBackend(device, config, init_params(config, seed=1), adapter, _train(1.0))


def test_adapt_on_the_gpu_accepts_what_numpy_accepts(device, tmp_path, capsys) -> None:
    """The whole recipe (``evermind adapt --device gpu``): the same split, rehearsal and
    judgement, the adapter trained on the GPU; its held-out loss lands where numpy's does."""
    import json

    from evermind.cli import main as cli_main
    from evermind.package import read_package
    from evermind.train.adapt import adapt
    from tests.factories import ADAPT_QUICK as QUICK
    from tests.factories import RIVERS as NEW
    from tests.factories import TEXT, tiny_package

    base = tiny_package(name="adapt-gpu", steps=30)
    on_cpu = adapt(base, NEW, QUICK, corpus=TEXT)
    on_gpu = adapt(base, NEW, QUICK, corpus=TEXT, device=device)
    assert on_cpu.accepted and on_gpu.accepted, (on_cpu.reason, on_gpu.reason)
    assert on_gpu.held_out_after == pytest.approx(on_cpu.held_out_after, abs=1e-3)
    assert on_gpu.original_after == pytest.approx(on_cpu.original_after, abs=1e-3)
    model, domain = tmp_path / "m.evermind", tmp_path / "rivers.md"
    model.write_bytes(base)
    domain.write_text("\n\n".join(NEW), encoding="utf-8")
    corpus = tmp_path / "corpus.txt"
    corpus.write_text(TEXT, encoding="utf-8")
    out = tmp_path / "new.evermind"
    args = [str(model), str(domain), "--corpus", str(corpus), "--out", str(out)]
    args += ["--seq-len", "32", "--steps", "30", "--lr", "1e-2", "--device", "gpu"]
    code = cli_main(["adapt", *args])
    captured = capsys.readouterr()
    line = json.loads(captured.out.strip().splitlines()[-1])
    assert code == 0 and line["accepted"], line["reason"]
    assert "adapt: device " in captured.err and read_package(out.read_bytes()).version == "0.1.1"
