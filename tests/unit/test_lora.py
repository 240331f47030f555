"""LoRA adapters (evermind.train.lora): exact gradients, a frozen base, merging, the file.

The gradient check runs in float64 against central finite differences of the model's loss
with respect to every entry of every ``A`` and ``B`` (``B`` set non-zero, or ``dA`` would be
zero and prove nothing); the error measure and bound are those of test_model_cpu
(relative error of each tensor below 1e-6).
"""

from __future__ import annotations

import io
import json
import zipfile
from array import array

import numpy as np
import pytest

from evermind.errors import ConfigError, PackageError
from evermind.model import MambaConfig, init_params
from evermind.model.inference import Model
from evermind.package import read_package
from evermind.package.safetensors_io import decode_safetensors
from evermind.train.adapt import AdaptConfig
from evermind.train.loop import Trainer
from evermind.train.lora import (
    DEFAULT_TARGETS,
    MAMBA2_TARGETS,
    LoraAdapter,
    LoraBackend,
    LoraConfig,
    block_targets,
    init_adapter,
)
from evermind.train.lora_file import ADAPTER_FORMAT, adapter_bytes, merge_package, read_adapter
from evermind.types import TrainConfig
from tests.factories import TEXT, run_sync, tiny_package
from tests.numerics import assert_close
from tests.unit.test_model_cpu import numeric_grad, random_params, rel_error

GRAD_RTOL = 1e-6
# Odd sizes: d_inner 14, dt_rank 1, x_proj (1 + 2*3, 14).
TINY = MambaConfig(d_model=7, n_layer=2, vocab_size=13, d_state=3)
# Mamba-2, odd sizes: 3 heads of 3 in 1 group, chunks of 3 (in_proj (9 + 15 + 3, 9)).
TINY2 = MambaConfig(
    block="mamba2", d_model=9, n_layer=2, vocab_size=13, d_state=3, expand=1, head_dim=3,
    n_groups=1, chunk_size=3,
)  # fmt: skip
TRAIN = TrainConfig(steps=4, batch_size=2, seq_len=16, lr=1e-2, warmup_steps=1, eval_every=0)


def _random_b(adapter: LoraAdapter, seed: int) -> LoraAdapter:
    rng = np.random.default_rng(seed)
    for name, b in adapter.B.items():
        adapter.B[name] = (0.3 * rng.standard_normal(b.shape)).astype(np.float32)
    return adapter


@pytest.mark.parametrize(
    ("config", "targets", "rank"),
    [
        (TINY, ("in_proj", "x_proj", "out_proj"), 3),
        (TINY, ("dt_proj",), 1),
        (TINY2, ("in_proj", "out_proj"), 2),
    ],
    ids=["mamba1", "mamba1-dt_proj", "mamba2"],
)
def test_adapter_gradients_match_finite_differences(
    config: MambaConfig, targets: tuple[str, ...], rank: int
) -> None:
    lora = LoraConfig(rank, 5.0, targets, seed=2)
    adapter = _random_b(init_adapter(config, lora, "sha256:x"), 4)
    backend = LoraBackend(config, random_params(config, 7), adapter, TRAIN, dtype=np.float64)
    rng = np.random.default_rng(3)
    ids = rng.integers(0, config.vocab_size, (2, 5))
    targets_ids = rng.integers(0, config.vocab_size, (2, 5))
    _, dA, dB = backend.loss_and_grads(ids, targets_ids)
    errors = {}
    for part, tensors, grads in (("A", backend.A, dA), ("B", backend.B, dB)):
        for name, value in tensors.items():
            assert grads[name].shape == value.shape
            numeric = numeric_grad(lambda: backend.loss_and_grads(ids, targets_ids)[0], value)
            assert np.linalg.norm(numeric) > 0, f"d{part}[{name}]: numeric gradient is all zero"
            errors[f"{part}[{name}]"] = rel_error(grads[name], numeric)
    for label, err in errors.items():
        print(f"lora d{label}: rel err {err:.2e}")
    worst = max(errors, key=errors.__getitem__)
    assert errors[worst] < GRAD_RTOL, f"d{worst}: rel err {errors[worst]:.2e} >= {GRAD_RTOL}"


def test_training_moves_only_the_adapter() -> None:
    base = {k: np.array(v, np.float32) for k, v in init_params(TINY, 1).items()}
    adapter = init_adapter(TINY, LoraConfig(rank=2), "sha256:x")
    backend = LoraBackend(TINY, base, adapter, TRAIN)
    fresh = backend.model.forward(np.arange(6)[None, :] % TINY.vocab_size)
    shapes = TINY.param_shapes()
    untouched = {k: v.reshape(shapes[k]) for k, v in base.items()}
    # A fresh adapter (B = 0) is the base model exactly.
    for name, value in untouched.items():
        np.testing.assert_array_equal(backend.model.params[name], value, err_msg=name)
    tokens = np.random.default_rng(0).integers(0, TINY.vocab_size, 400).astype(np.int32)
    run_sync(Trainer(backend, array("i", tokens), array("i"), TRAIN).run())
    trained = backend.adapter()
    assert any(np.abs(b).max() > 0 for b in trained.B.values()), "B never moved"
    assert any(not np.array_equal(trained.A[n], adapter.A[n]) for n in adapter.A)
    for name, value in untouched.items():
        if name in trained.A:  # the frozen copy is untouched, the served weight is W + s·B·A
            np.testing.assert_array_equal(backend.base[name], value, err_msg=name)
            want = value.astype(np.float64) + trained.delta(name)
            assert_close(backend.model.params[name], want, atol=1e-6, rtol=1e-5, name=name)
        else:
            np.testing.assert_array_equal(backend.model.params[name], value, err_msg=name)
    assert not np.array_equal(backend.model.forward(np.arange(6)[None, :] % 13), fresh)


def _trained_on(package: bytes, seed: int = 0) -> tuple[LoraBackend, LoraAdapter]:
    pkg = read_package(package)
    model = Model(pkg)
    lora = LoraConfig(rank=4, targets=block_targets(model.config))
    adapter = _random_b(init_adapter(model.config, lora, pkg.digest, pkg.ref), seed)
    backend = LoraBackend(model.config, model.cpu.params, adapter, TRAIN)
    return backend, backend.adapter()


@pytest.mark.parametrize("block", ["mamba1", "mamba2"])
def test_merged_package_equals_the_adapter_forward_and_keeps_the_tensor_names(block: str) -> None:
    base_bytes = tiny_package(name="lora-base", steps=5, block=block)
    backend, adapter = _trained_on(base_bytes)
    merged = read_package(merge_package(read_package(base_bytes), adapter, version="0.1.1"))
    base = read_package(base_bytes)
    assert set(merged.tensors) == set(base.tensors)
    assert {k: t.shape for k, t in merged.tensors.items()} == {
        k: t.shape for k, t in base.tensors.items()
    }
    assert merged.version == "0.1.1" and merged.manifest["training"]["adapter"]["rank"] == 4
    ids = np.array([Model(base).tokenizer.encode(TEXT[:120])])
    mine = Model(merged).cpu.forward(ids)
    assert_close(mine, backend.model.forward(ids), atol=1e-5, rtol=1e-5, name="merged logits")
    assert np.abs(mine - Model(base).cpu.forward(ids)).max() > 1e-3  # the adapter did something


@pytest.mark.parametrize(
    ("block", "architecture"), [("mamba1", "MambaForCausalLM"), ("mamba2", "Mamba2ForCausalLM")]
)
def test_merged_package_loads_in_transformers_with_the_same_logits(
    tmp_path, block: str, architecture: str
) -> None:
    torch = pytest.importorskip("torch", reason="torch is the interop reference (test extra)")
    transformers = pytest.importorskip("transformers", reason="the interop reference")
    base_bytes = tiny_package(name="lora-base", steps=5, block=block)
    _, adapter = _trained_on(base_bytes, seed=1)
    path = tmp_path / "merged.evermind"
    path.write_bytes(merge_package(read_package(base_bytes), adapter))
    with zipfile.ZipFile(path) as archive:
        archive.extractall(tmp_path / "unzipped")
    hf = getattr(transformers, architecture).from_pretrained(tmp_path / "unzipped").eval()
    ours = Model(read_package(path.read_bytes()))
    ids = np.array([ours.tokenizer.encode(TEXT[:100])])
    with torch.no_grad():
        theirs = hf(torch.from_numpy(ids)).logits.numpy()
    assert_close(theirs, ours.cpu.forward(ids), atol=1e-4, rtol=1e-4, name="transformers logits")


def test_adapter_file_round_trips_and_is_refused_on_another_base() -> None:
    base_bytes = tiny_package(name="lora-base", steps=5)
    _, adapter = _trained_on(base_bytes)
    data = adapter_bytes(adapter)
    tensors, meta = decode_safetensors(data, member="a", max_header_bytes=1 << 20)
    assert meta["format"] == ADAPTER_FORMAT and meta["rank"] == "4"
    assert json.loads(meta["targets"]) == ["in_proj", "x_proj", "out_proj"]
    assert meta["base_digest"] == read_package(base_bytes).digest
    assert "base_model.model.backbone.layers.0.mixer.in_proj.lora_A.weight" in tensors
    back = read_adapter(data)
    assert (back.rank, back.alpha, back.targets) == (4, 16.0, ("in_proj", "x_proj", "out_proj"))
    for name in adapter.A:
        np.testing.assert_array_equal(back.A[name], adapter.A[name])
        np.testing.assert_array_equal(back.B[name], adapter.B[name])
    # Merging the file read back gives the same package weights as the adapter in memory.
    one = read_package(merge_package(read_package(base_bytes), back))
    two = read_package(merge_package(read_package(base_bytes), adapter))
    assert all(one.tensors[k].data == two.tensors[k].data for k in one.tensors)
    other = read_package(tiny_package(name="lora-base", steps=5, seed=1))
    with pytest.raises(PackageError, match=r"refused on evermind/lora-base:0\.1\.0"):
        merge_package(other, back)
    # A safetensors file that is not an adapter (the base's own weights).
    weights = zipfile.ZipFile(io.BytesIO(base_bytes)).read("model.safetensors")
    with pytest.raises(PackageError, match=r"expected 'evermind\.lora/1'"):
        read_adapter(weights)


def test_damaged_adapter_files_are_refused() -> None:
    _, adapter = _trained_on(tiny_package(name="lora-base", steps=5))
    missing = LoraAdapter(**{**adapter.__dict__, "A": dict(list(adapter.A.items())[1:])})
    with pytest.raises(PackageError, match="expected lora_A and lora_B"):
        read_adapter(adapter_bytes(missing))
    name = next(iter(adapter.B))
    poisoned = LoraAdapter(
        **{**adapter.__dict__, "B": {**adapter.B, name: adapter.B[name] * np.nan}}
    )
    with pytest.raises(PackageError, match="NaN or infinity"):
        read_adapter(adapter_bytes(poisoned))


@pytest.mark.parametrize("rank", [0, -1, 2.5, True, "8"])
def test_bad_rank_is_refused(rank: object) -> None:
    with pytest.raises(ConfigError, match="rank"):
        LoraConfig(rank=rank)  # type: ignore[arg-type]
    with pytest.raises(ConfigError, match="rank"):
        AdaptConfig(rank=rank)  # type: ignore[arg-type]


def test_rank_above_a_projection_and_bad_targets_are_refused() -> None:
    # dt_proj is (d_inner, dt_rank) = (14, 1): rank 2 cannot fit.
    with pytest.raises(ConfigError, match=r"exceeds backbone.layers.0.mixer.dt_proj.weight"):
        init_adapter(TINY, LoraConfig(rank=2, targets=("dt_proj",)), "sha256:x")
    with pytest.raises(ConfigError, match="targets"):
        LoraConfig(targets=("conv1d",))
    with pytest.raises(ConfigError, match="targets"):
        LoraConfig(targets=("in_proj", "in_proj"))
    with pytest.raises(ConfigError, match="alpha"):
        LoraConfig(alpha=0.0)


def test_mamba2_adapter_file_round_trips_and_mamba1_only_targets_are_refused() -> None:
    base_bytes = tiny_package(name="lora-base", steps=5, block="mamba2")
    _, adapter = _trained_on(base_bytes)
    assert adapter.targets == ("in_proj", "out_proj")
    back = read_adapter(adapter_bytes(adapter))
    assert back.targets == adapter.targets and set(back.A) == set(adapter.A)
    one = read_package(merge_package(read_package(base_bytes), back))
    two = read_package(merge_package(read_package(base_bytes), adapter))
    assert all(one.tensors[k].data == two.tensors[k].data for k in one.tensors)
    for targets in (("x_proj",), ("in_proj", "dt_proj")):
        with pytest.raises(ConfigError, match="mamba2 block has no"):
            init_adapter(TINY2, LoraConfig(rank=1, targets=targets), "sha256:x")
    assert block_targets(TINY2) == MAMBA2_TARGETS and block_targets(TINY) == DEFAULT_TARGETS
