"""Interop proof: our config, weights and CPU model agree with Hugging Face transformers.

Builds ``transformers.MambaForCausalLM`` from ``MambaConfig(**cfg.to_hf_config())``, loads our
weights, and compares logits (float32, atol 1e-4) and the gradient of the mean cross-entropy
for every parameter against torch autograd (float32, relative error 1e-4 per tensor).
transformers without the CUDA kernels runs its slow PyTorch path, which is the reference here.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest

from evermind.model import MambaConfig, init_params
from evermind.model.cpu import CpuMamba

torch = pytest.importorskip("torch", reason="the HF interop proof needs torch (CPU wheel)")
transformers = pytest.importorskip(
    "transformers", reason="the HF interop proof needs transformers' MambaForCausalLM"
)

pytestmark = pytest.mark.slow

LOGITS_ATOL = 1e-4
GRAD_RTOL = 1e-4

# Not powers of two; dt_rank 3, two layers, a vocabulary bigger than d_model.
CONFIG = MambaConfig(d_model=40, n_layer=2, vocab_size=301, d_state=7, eos_token_id=1)


@pytest.fixture(scope="module")
def models() -> tuple[CpuMamba, Any]:
    torch.manual_seed(0)
    ours = CpuMamba(CONFIG, init_params(CONFIG, 3))
    rng = np.random.default_rng(0)
    for value in ours.params.values():  # move off the init's special values (D=1, ...)
        value += (0.05 * rng.standard_normal(value.shape)).astype(np.float32)
    hf_config = transformers.MambaConfig(**CONFIG.to_hf_config())
    theirs = transformers.MambaForCausalLM(hf_config).float().eval()
    state = {name: torch.from_numpy(value.copy()) for name, value in ours.params.items()}
    result = theirs.load_state_dict(state, strict=False)
    assert result.unexpected_keys == []
    assert result.missing_keys in ([], ["lm_head.weight"])  # tied: no stored LM head
    assert theirs.lm_head.weight.data_ptr() == theirs.backbone.embeddings.weight.data_ptr()
    return ours, theirs


def test_hf_config_dict_is_accepted_and_round_trips() -> None:
    hf_config = transformers.MambaConfig(**CONFIG.to_hf_config())
    assert hf_config.intermediate_size == CONFIG.d_inner
    assert hf_config.time_step_rank == CONFIG.dt_rank
    assert hf_config.tie_word_embeddings is True
    assert MambaConfig.from_hf_config(hf_config.to_dict()) == CONFIG


def test_param_shapes_and_order_match_hf_state_dict(models: tuple[CpuMamba, Any]) -> None:
    _, theirs = models
    hf_shapes = {
        name: tuple(tensor.shape)
        for name, tensor in theirs.state_dict().items()
        if name != "lm_head.weight"
    }
    assert list(hf_shapes.items()) == list(CONFIG.param_shapes().items())


def test_logits_match(models: tuple[CpuMamba, Any]) -> None:
    ours, theirs = models
    ids = np.random.default_rng(1).integers(0, CONFIG.vocab_size, (3, 37))
    with torch.no_grad():
        expected = theirs(torch.from_numpy(ids)).logits.numpy()
    got = ours.forward(ids)
    diff = np.abs(got - expected).max()
    print(f"logits vs transformers: max abs diff {diff:.2e} (scale {np.abs(expected).max():.2f})")
    assert diff < LOGITS_ATOL


def test_recurrent_step_matches_hf_forward(models: tuple[CpuMamba, Any]) -> None:
    ours, theirs = models
    ids = np.random.default_rng(2).integers(0, CONFIG.vocab_size, (2, 12))
    with torch.no_grad():
        expected = theirs(torch.from_numpy(ids)).logits.numpy()
    state = ours.init_state(2)
    stepped = np.stack([ours.step(ids[:, t], state)[0] for t in range(12)], axis=1)
    diff = np.abs(stepped - expected).max()
    print(f"step logits vs transformers: max abs diff {diff:.2e}")
    assert diff < LOGITS_ATOL


def test_gradients_match_torch_autograd(models: tuple[CpuMamba, Any]) -> None:
    ours, theirs = models
    rng = np.random.default_rng(4)
    ids = rng.integers(0, CONFIG.vocab_size, (2, 19))
    targets = rng.integers(0, CONFIG.vocab_size, (2, 19))
    targets[1, :4] = -100
    loss, grads = ours.loss_and_grads(ids, targets)

    theirs.zero_grad()
    logits = theirs(torch.from_numpy(ids)).logits
    torch_loss = torch.nn.functional.cross_entropy(
        logits.reshape(-1, CONFIG.vocab_size), torch.from_numpy(targets).reshape(-1)
    )
    torch_loss.backward()
    assert loss == pytest.approx(torch_loss.item(), rel=1e-5)
    params = dict(theirs.named_parameters())  # the tied LM head appears once, as embeddings
    worst = 0.0
    for name, grad in grads.items():
        expected = params[name].grad.numpy()
        err = float(np.linalg.norm(grad - expected) / np.linalg.norm(expected))
        worst = max(worst, err)
        assert err < GRAD_RTOL, f"{name}: relative error {err:.2e} >= {GRAD_RTOL}"
    print(f"gradients vs torch autograd: worst relative error {worst:.2e} over {len(grads)}")
