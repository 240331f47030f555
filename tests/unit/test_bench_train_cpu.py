"""``benchmarks/train_cpu.py``'s PyTorch peer is our model: same layout, same loss, same gradients.

The benchmark's claim "a PyTorch Mamba of identical shape" rests on
``benchmarks/torch_mamba.py``: our weights must load into it unchanged (strict: no name or
shape missing or extra), and on a batch its loss and every parameter's gradient (torch
autograd, float64) must equal ``CpuMamba``'s (float64), for a plain Mamba-1 model and with the
cortex (its load-balancing loss included). The benchmark's children themselves are timed
runs, not tested here beyond one short child of ours (its JSON fields and parameter count).
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

import numpy as np
import pytest
import torch  # the benchmark's peer; make test installs it: a missing one fails
from benchmarks.torch_mamba import TorchMamba

from evermind.model.config import MambaConfig
from evermind.model.cpu import CpuMamba
from tests import procs
from tests.unit.test_model_cpu import random_params

CONFIGS = {
    "mamba1": MambaConfig(d_model=8, n_layer=2, vocab_size=13, d_state=3),
    "cortex": MambaConfig(
        d_model=8, n_layer=2, vocab_size=13, d_state=3, moe_experts=3, moe_top_k=2,
        moe_intermediate=5, moe_shared_intermediate=4, moe_every=1,
    ),
}  # fmt: skip


@pytest.mark.parametrize("name", sorted(CONFIGS))
def test_the_torch_peer_has_our_layout_loss_and_gradients(name: str) -> None:
    config = CONFIGS[name]
    params = random_params(config, 7)
    rng = np.random.default_rng(3)
    ids = rng.integers(0, config.vocab_size, (2, 9))
    targets = rng.integers(0, config.vocab_size, (2, 9))
    loss, grads = CpuMamba(config, params, np.float64).loss_and_grads(ids, targets)

    net = TorchMamba(config).double()
    net.load_state_dict({k: torch.from_numpy(v.copy()) for k, v in params.items()}, strict=True)
    logits, aux = net(torch.from_numpy(ids))
    peer_loss = torch.nn.functional.cross_entropy(
        logits.reshape(-1, config.vocab_size), torch.from_numpy(targets).reshape(-1)
    )
    if aux is not None:
        peer_loss = peer_loss + config.router_aux_loss_coef * aux
    assert (aux is None) == (name == "mamba1")
    peer_loss.backward()
    peer = float(peer_loss.detach())
    print(f"{name}: loss ours {loss:.12f}, torch {peer:.12f}")
    assert abs(peer - loss) <= 1e-10 * abs(loss)
    for key, parameter in net.named_parameters():
        assert parameter.grad is not None, key
        got, want = parameter.grad.numpy(), grads[key]
        scale = max(float(np.abs(want).max()), 1e-12)
        assert float(np.abs(got - want).max()) <= 1e-8 * scale, key


def test_a_child_of_ours_reports_its_step_and_parameter_count() -> None:
    done = procs.run(
        [sys.executable, "-m", "benchmarks.train_cpu", "--child", "mamba1", "ours", "1",
         "--steps", "1", "--warmup", "0"],
        capture_output=True, text=True, timeout=120, cwd=Path(__file__).parents[2],
    )  # fmt: skip
    assert done.returncode == 0, done.stderr[-2000:]
    row = json.loads(done.stdout.strip().splitlines()[-1])
    assert row["params"] == row["expected_params"] == 728704  # the nano preset, vocab 2048
    assert row["tokens_per_s"] > 0 and 7.0 < row["first_loss"] < 8.5  # ~ln(2048) = 7.62
