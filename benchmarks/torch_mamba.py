"""A plain PyTorch Mamba-1 (optionally with the cortex) of our parameter layout: the naive peer.

``benchmarks/train_cpu.py``'s PyTorch peer: the textbook Mamba block in torch, with the
parameter names and shapes of :class:`evermind.model.config.MambaConfig`'s layout (HF
``MambaForCausalLM``'s, plus the cortex's ``moe_norm`` / ``moe.*`` tensors), so that our
seed-0 weights load into it unchanged and its loss on a batch equals ours. The selective scan
is ``mamba_ssm``'s ``selective_scan_ref``: every decay ``exp(delta A)`` and drive
``delta B x`` computed at once, then a sequential loop over time. The cortex is Qwen2-MoE's
sparse block written out (softmax router, top-k without renormalisation, SwiGLU experts looped
over, a sigmoid-gated shared expert) with HF's pooled load-balancing loss.

Native-only, bench-only: imports torch. Not part of the package.
"""

from __future__ import annotations

from typing import Any

import torch
from torch import nn
from torch.nn import functional

__all__ = ["TorchMamba", "selective_scan_naive"]


def selective_scan_naive(
    u: torch.Tensor,
    delta: torch.Tensor,
    A: torch.Tensor,
    B: torch.Tensor,
    C: torch.Tensor,
    D: torch.Tensor,
) -> torch.Tensor:
    """y (b, L, I) of the selective scan, a Python loop over L (``selective_scan_ref``).

    Args:
        u: Input (b, L, I). delta: Time step after softplus (b, L, I). A: (I, N), negative.
        B, C: (b, L, N). D: Skip gain (I,).
    """
    decay = torch.exp(delta.unsqueeze(-1) * A)  # (b, L, I, N)
    drive = (delta * u).unsqueeze(-1) * B.unsqueeze(2)  # (b, L, I, N)
    h = u.new_zeros(u.shape[0], u.shape[2], A.shape[1])  # (b, I, N)
    ys = []
    for t in range(u.shape[1]):
        h = decay[:, t] * h + drive[:, t]
        ys.append(torch.einsum("bin,bn->bi", h, C[:, t]))
    return torch.stack(ys, dim=1) + u * D


class RMSNorm(nn.Module):
    def __init__(self, width: int, eps: float) -> None:
        super().__init__()
        self.weight = nn.Parameter(torch.ones(width))
        self.eps = eps

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.weight * (x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + self.eps))


class Mixer(nn.Module):
    """The Mamba-1 mixer: in_proj, causal depthwise conv, SiLU, x_proj, dt_proj, scan, gate."""

    def __init__(self, cfg: Any) -> None:
        super().__init__()
        inner, rank, state = cfg.d_inner, cfg.dt_rank, cfg.d_state
        self.sizes = (inner, rank, state)
        self.in_proj = nn.Linear(cfg.d_model, 2 * inner, bias=False)
        self.conv1d = nn.Conv1d(inner, inner, cfg.d_conv, groups=inner, padding=cfg.d_conv - 1)
        self.x_proj = nn.Linear(inner, rank + 2 * state, bias=False)
        self.dt_proj = nn.Linear(rank, inner, bias=True)
        self.A_log = nn.Parameter(torch.zeros(inner, state))
        self.D = nn.Parameter(torch.ones(inner))
        self.out_proj = nn.Linear(inner, cfg.d_model, bias=False)

    def forward(self, h: torch.Tensor) -> torch.Tensor:
        inner, rank, state = self.sizes
        length = h.shape[1]
        x, z = self.in_proj(h).split(inner, dim=-1)
        x = functional.silu(self.conv1d(x.transpose(1, 2))[..., :length].transpose(1, 2))
        dt, B, C = self.x_proj(x).split([rank, state, state], dim=-1)
        delta = functional.softplus(self.dt_proj(dt))
        y = selective_scan_naive(x, delta, -torch.exp(self.A_log), B, C, self.D)
        out: torch.Tensor = self.out_proj(y * functional.silu(z))
        return out


class SwiGLU(nn.Module):
    def __init__(self, width: int, inner: int) -> None:
        super().__init__()
        self.gate_proj = nn.Linear(width, inner, bias=False)
        self.up_proj = nn.Linear(width, inner, bias=False)
        self.down_proj = nn.Linear(inner, width, bias=False)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        out: torch.Tensor = self.down_proj(functional.silu(self.gate_proj(x)) * self.up_proj(x))
        return out


class Moe(nn.Module):
    """Qwen2-MoE's sparse block on (M, D) rows: ``(out, router probabilities, top-k idx)``."""

    def __init__(self, cfg: Any) -> None:
        super().__init__()
        self.top_k = cfg.moe_top_k
        self.gate = nn.Linear(cfg.d_model, cfg.moe_experts, bias=False)
        self.experts = nn.ModuleList(
            SwiGLU(cfg.d_model, cfg.moe_intermediate) for _ in range(cfg.moe_experts)
        )
        self.shared_expert = SwiGLU(cfg.d_model, cfg.moe_shared_intermediate)
        self.shared_expert_gate = nn.Linear(cfg.d_model, 1, bias=False)

    def forward(self, x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        probs = torch.softmax(self.gate(x), dim=-1)  # (M, E)
        gates, idx = torch.topk(probs, self.top_k, dim=-1)  # (M, k)
        out = torch.zeros_like(x)
        for e, expert in enumerate(self.experts):
            rows, slot = torch.nonzero(idx == e, as_tuple=True)
            if rows.numel():
                out = out.index_add(0, rows, gates[rows, slot, None] * expert(x[rows]))
        shared = torch.sigmoid(self.shared_expert_gate(x)) * self.shared_expert(x)
        return out + shared, probs, idx


class Layer(nn.Module):
    def __init__(self, cfg: Any, cortex: bool) -> None:
        super().__init__()
        self.norm = RMSNorm(cfg.d_model, cfg.rms_eps)
        self.mixer = Mixer(cfg)
        if cortex:
            self.moe_norm = RMSNorm(cfg.d_model, cfg.rms_eps)
            self.moe = Moe(cfg)


class Backbone(nn.Module):
    def __init__(self, cfg: Any) -> None:
        super().__init__()
        self.embeddings = nn.Embedding(cfg.vocab_size, cfg.d_model)
        cortex = set(cfg.moe_layers)
        self.layers = nn.ModuleList(Layer(cfg, i in cortex) for i in range(cfg.n_layer))
        self.norm_f = RMSNorm(cfg.d_model, cfg.rms_eps)


class TorchMamba(nn.Module):
    """Mamba-1 LM (tied head) in plain torch; ``forward(ids)`` is ``(logits, aux or None)``,
    aux being HF's pooled load-balancing loss of the cortex layers."""

    def __init__(self, cfg: Any) -> None:
        super().__init__()
        if cfg.block != "mamba1":
            raise ValueError(f"TorchMamba: Mamba-1 blocks only, got block={cfg.block!r}")
        self.backbone = Backbone(cfg)
        self.n_experts = cfg.moe_experts

    def forward(self, ids: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor | None]:
        h = self.backbone.embeddings(ids)
        routed: list[tuple[torch.Tensor, torch.Tensor]] = []
        for layer in self.backbone.layers:
            h = h + layer.mixer(layer.norm(h))
            if hasattr(layer, "moe"):
                out, probs, idx = layer.moe(layer.moe_norm(h).reshape(-1, h.shape[-1]))
                h = h + out.reshape(h.shape)
                routed.append((probs, idx))
        logits = self.backbone.norm_f(h) @ self.backbone.embeddings.weight.T
        if not routed:
            return logits, None
        probs = torch.cat([p for p, _ in routed])  # (R, E): HF pools the layers' rows
        idx = torch.cat([i for _, i in routed])  # (R, k)
        counts = functional.one_hot(idx, self.n_experts).sum(dim=(0, 1)).to(probs.dtype)
        aux = self.n_experts * torch.sum(counts / probs.shape[0] * probs.mean(dim=0))
        return logits, aux
