"""CPU training against PyTorch: our numpy step and a torch Mamba of identical shape, interleaved.

Issue 42 asks for numpy training at >= 1.5x "a PyTorch Mamba of identical shape (naive scan)"
at one thread. This script makes that comparison. Each measurement is one full training
step (forward, backward, global-norm clip, AdamW) on the same (B 4, L 128) batch of the same
synthetic ids, from the same seed-0 initial weights, in float32:

- ``ours``: :class:`evermind.train.cpu_backend.CpuBackend` (the numpy model + AdamW), what
  ``evermind train --device cpu`` runs;
- ``naive``: :class:`TorchMamba`, written here in plain PyTorch with the parameter names and
  shapes of ours (and of ``transformers``' ``MambaForCausalLM``): embedding tied to the LM
  head, RMSNorm, in_proj, depthwise causal conv1d, x_proj, dt_proj, softplus, and the
  selective scan as a plain sequential loop over time (``mamba_ssm``'s
  ``selective_scan_ref``: all the decays ``exp(delta A)`` and drives ``delta B x`` at once,
  then ``h = decay_t * h + drive_t`` and ``y_t = C_t h`` per step), autograd, and
  ``torch.optim.AdamW`` with our decay groups and ``clip_grad_norm_``; with the cortex, a
  torch Qwen2-MoE block (the same routed SwiGLU experts looped over, the gated shared
  expert, HF's pooled load-balancing loss) after the mixers that carry it;
- ``hf``: ``transformers``' ``MambaForCausalLM`` (Mamba-1) or ``Mamba2ForCausalLM`` (Mamba-2)
  from the same config and weights, on their slow PyTorch paths (no CUDA kernels on a CPU).

Models (``--models``): ``mamba1`` (the nano preset, vocab 2048: the default model); ``cortex``
(nano with 4 routed experts, top-2, and a shared expert after layers 1 and 3; peer: ``naive``,
no ``transformers`` class has this model); ``mamba2`` (nano with Mamba-2 blocks, d_state 64,
one group, chunks of 64, as ``benchmarks/blocks.py``'s entry; peer: ``hf``, whose
``torch_forward`` is the chunked SSD of the Mamba-2 paper in plain PyTorch).

Every (model, side, threads) measurement runs in a fresh child process whose BLAS and torch
thread counts are set before numpy or torch is imported (``OPENBLAS_NUM_THREADS``,
``OMP_NUM_THREADS``, ``MKL_NUM_THREADS``, ``torch.set_num_threads``); each child checks that
its model's parameter count is the config's and reports its first loss (both sides must
agree: same function, same weights, same batch). Rounds interleave the sides (their order
swapped every round) so that both see the same load; the ratio is ours / peer tokens/s per
round, and the median over rounds. Absolute numbers depend on the machine and its load; read
the ratios.

Usage: python -m benchmarks.train_cpu [--rounds 3] [--threads 1,2] [--models mamba1,...]
       [--peers naive,hf] [--steps 6] [--json]
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import time
from functools import partial
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
BATCH, SEQ_LEN, VOCAB = 4, 128, 2048
LR = 3e-3

#: Model name -> (MambaConfig.preset("nano", VOCAB, **overrides), the peers that fit it).
MODELS: dict[str, tuple[dict[str, Any], tuple[str, ...]]] = {
    "mamba1": ({}, ("naive", "hf")),
    "cortex": ({"moe_experts": 4, "moe_top_k": 2, "moe_every": 2}, ("naive",)),
    "mamba2": ({"block": "mamba2", "d_state": 64, "n_groups": 1, "chunk_size": 64}, ("hf",)),
}


# -- the child: one side, one model, one thread count -----------------------------------------
def _config(model: str) -> Any:
    from evermind.model import MambaConfig

    return MambaConfig.preset("nano", VOCAB, **MODELS[model][0])


def _batch() -> tuple[Any, Any]:
    import numpy as np

    from evermind.studio.bench.suite import synthetic_batch

    inputs, targets = synthetic_batch(BATCH, SEQ_LEN, VOCAB)
    ids = np.frombuffer(inputs, np.int32).reshape(BATCH, SEQ_LEN)
    return ids, np.frombuffer(targets, np.int32).reshape(BATCH, SEQ_LEN)


def _ours(model: str) -> tuple[Any, int, float]:
    """(step function, parameter count, first loss) of our numpy backend."""
    import asyncio

    import numpy as np

    from evermind.model.init import init_params
    from evermind.train.cpu_backend import CpuBackend
    from evermind.train.loop import TrainConfig

    cfg = _config(model)
    backend = CpuBackend(cfg, init_params(cfg, 0), TrainConfig(batch_size=BATCH, seq_len=SEQ_LEN))
    ids, targets = _batch()
    batch = (ids.astype(np.int32).tobytes(), targets.astype(np.int32).tobytes())
    count = sum(int(p.size) for p in backend.model.params.values())
    steps = iter(range(1, 1 << 30))

    def step() -> float:
        return asyncio.run(backend.train_step([batch], LR, next(steps)))

    return step, count, step()


def _torch_state(cfg: Any) -> dict[str, Any]:
    import numpy as np
    import torch

    from evermind.model.init import init_params

    shapes = cfg.param_shapes()
    return {
        name: torch.from_numpy(np.frombuffer(values, np.float32).reshape(shapes[name]).copy())
        for name, values in init_params(cfg, 0).items()
    }


def _peer(model: str, side: str) -> tuple[Any, int, float]:
    """(step function, parameter count, first loss) of a PyTorch peer."""
    import torch

    from evermind.train.loop import TrainConfig

    cfg = _config(model)
    if side == "naive":
        from benchmarks.torch_mamba import TorchMamba

        net: Any = TorchMamba(cfg)
    else:
        import transformers

        transformers.logging.set_verbosity_error()
        if cfg.block == "mamba2":
            net = transformers.Mamba2ForCausalLM(transformers.Mamba2Config(**cfg.to_hf_config()))
        else:
            net = transformers.MambaForCausalLM(transformers.MambaConfig(**cfg.to_hf_config()))
    missing, unexpected = net.load_state_dict(_torch_state(cfg), strict=False)
    if [m for m in missing if m != "lm_head.weight"] or unexpected:
        raise SystemExit(f"{side}: weights do not match ours: {missing[:3]} {unexpected[:3]}")
    net.float().train()
    train = TrainConfig()
    named = [(n, p) for n, p in net.named_parameters()]
    count = sum(int(p.numel()) for _, p in named)
    optimizer = torch.optim.AdamW(
        [
            {"params": [p for n, p in named if not cfg.no_decay(n)]},
            {"params": [p for n, p in named if cfg.no_decay(n)], "weight_decay": 0.0},
        ],
        lr=LR,
        betas=(train.beta1, train.beta2),
        eps=train.eps,
        weight_decay=train.weight_decay,
    )
    ids_np, targets_np = _batch()
    ids = torch.from_numpy(ids_np.astype("int64"))
    targets = torch.from_numpy(targets_np.astype("int64")).reshape(-1)

    def step() -> float:
        if side == "naive":
            logits, aux = net(ids)
        else:
            logits, aux = net(ids).logits, None
        loss = torch.nn.functional.cross_entropy(logits.reshape(-1, cfg.vocab_size), targets)
        if aux is not None:
            loss = loss + cfg.router_aux_loss_coef * aux
        optimizer.zero_grad(set_to_none=True)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(net.parameters(), train.grad_clip)
        optimizer.step()
        return float(loss.detach())

    return step, count, step()


def child(model: str, side: str, threads: int, steps: int, warmup: int) -> dict[str, Any]:
    """One measurement: build, warm up, time ``steps`` steps; the env already set threads."""
    if side != "ours":
        import torch

        torch.set_num_threads(threads)
    step, count, first_loss = _ours(model) if side == "ours" else _peer(model, side)
    for _ in range(warmup):
        step()
    times = []
    for _ in range(steps):
        start = time.perf_counter()
        step()
        times.append(time.perf_counter() - start)
    seconds = statistics.median(times)
    return {
        "model": model,
        "side": side,
        "threads": threads,
        "params": count,
        "expected_params": _config(model).n_params,
        "first_loss": first_loss,
        "step_ms": 1e3 * seconds,
        "tokens_per_s": BATCH * SEQ_LEN / seconds,
    }


# -- the parent: rounds of children ------------------------------------------------------------
def run_child(
    model: str, side: str, threads: int, steps: int, warmup: int, timeout: float
) -> dict[str, Any]:
    """One measurement in a fresh child; a row with ``error`` when it failed or timed out."""
    env = dict(os.environ)
    for name in ("OPENBLAS_NUM_THREADS", "OMP_NUM_THREADS", "MKL_NUM_THREADS"):
        env[name] = str(threads)
    env["PYTHONPATH"] = os.pathsep.join([str(ROOT / "src"), str(ROOT), env.get("PYTHONPATH", "")])
    args = [sys.executable, "-m", "benchmarks.train_cpu", "--child", model, side, str(threads)]
    args += ["--steps", str(steps), "--warmup", str(warmup)]
    failed = {"model": model, "side": side, "threads": threads}
    try:
        done = subprocess.run(
            args, cwd=ROOT, env=env, capture_output=True, text=True, timeout=timeout, check=False
        )
    except subprocess.TimeoutExpired:  # subprocess.run has killed the child
        return failed | {"error": f"timed out after {timeout:.0f} s"}
    if done.returncode != 0:
        tail = (done.stderr or done.stdout).strip().splitlines()[-1:]
        return failed | {"error": f"exit {done.returncode}: {tail}"}
    result: dict[str, Any] = json.loads(done.stdout.strip().splitlines()[-1])
    return result


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=3, help="interleaved rounds (default 3)")
    parser.add_argument("--threads", default="1,2", help="thread counts, in order (default 1,2)")
    parser.add_argument("--models", default="mamba1,cortex,mamba2", help="of " + ",".join(MODELS))
    parser.add_argument("--peers", default="naive,hf", help="PyTorch peers: naive, hf")
    parser.add_argument("--steps", type=int, default=6, help="timed steps per child (median)")
    parser.add_argument("--warmup", type=int, default=2, help="untimed steps after the first")
    parser.add_argument(
        "--child-timeout", type=float, default=300.0, help="seconds per child (default 300)"
    )
    parser.add_argument("--json", action="store_true", help="one JSON document instead of text")
    parser.add_argument("--child", nargs=3, metavar=("MODEL", "SIDE", "THREADS"), help="internal")
    args = parser.parse_args(argv)
    if args.child:
        model, side, threads = args.child
        print(json.dumps(child(model, side, int(threads), args.steps, args.warmup)))
        return 0
    models = [m for m in args.models.split(",") if m]
    peers = [p for p in args.peers.split(",") if p]
    bad = [m for m in models if m not in MODELS] + [p for p in peers if p not in ("naive", "hf")]
    if bad or args.rounds < 1 or args.steps < 1:
        parser.error(f"unknown model or peer {bad}, or rounds/steps < 1")
    threads_list = [int(t) for t in args.threads.split(",") if t]
    rows: list[dict[str, Any]] = []
    summary: list[dict[str, Any]] = []
    load = os.getloadavg()[0]
    # With --json the progress lines go to stderr, so a long run shows where it is.
    say = partial(print, file=sys.stderr, flush=True) if args.json else print
    say(f"train_cpu: nano B{BATCH} L{SEQ_LEN} V{VOCAB}, load average {load:.2f} at start")
    for threads in threads_list:
        for model in models:
            sides = ["ours"] + [p for p in peers if p in MODELS[model][1]]
            if len(sides) == 1:
                continue
            per_round: dict[str, list[float]] = {side: [] for side in sides}
            params = 0
            for index in range(args.rounds):
                order = sides if index % 2 == 0 else sides[::-1]
                got = {
                    s: run_child(model, s, threads, args.steps, args.warmup, args.child_timeout)
                    for s in order
                }
                rows += [got[side] | {"round": index + 1} for side in sides]
                errors = [f"{s}: {got[s]['error']}" for s in sides if "error" in got[s]]
                if errors:  # the round does not count; the next one runs
                    say(f"{threads} thread(s) {model:6s} round {index + 1}: " + "; ".join(errors))
                    continue
                params = got["ours"]["params"]
                for side in sides:
                    per_round[side].append(got[side]["tokens_per_s"])
                    if got[side]["params"] != got[side]["expected_params"]:
                        raise SystemExit(f"train_cpu: {model}/{side} has {got[side]['params']}")
                say(
                    f"{threads} thread(s) {model:6s} round {index + 1}: "
                    + ", ".join(
                        f"{s} {got[s]['tokens_per_s']:7.0f} tok/s "
                        f"(loss0 {got[s]['first_loss']:.4f})"
                        for s in sides
                    )
                    + "".join(
                        f", ours/{s} {got['ours']['tokens_per_s'] / got[s]['tokens_per_s']:.2f}x"
                        for s in sides[1:]
                    )
                )
            for peer in sides[1:] if per_round["ours"] else []:
                ratios = [o / p for o, p in zip(per_round["ours"], per_round[peer], strict=True)]
                summary.append(
                    {
                        "model": model,
                        "threads": threads,
                        "peer": peer,
                        "params": params,
                        "ours_tokens_per_s": statistics.median(per_round["ours"]),
                        "peer_tokens_per_s": statistics.median(per_round[peer]),
                        "ratios": ratios,
                        "median_ratio": statistics.median(ratios),
                    }
                )
                s = summary[-1]
                say(
                    f"  {model} vs {peer} at {threads} thread(s), {s['params']:,} params each: "
                    f"median ours/{peer} {s['median_ratio']:.2f}x "
                    f"(ours {s['ours_tokens_per_s']:.0f}, "
                    f"{peer} {s['peer_tokens_per_s']:.0f} tok/s)"
                )
    end_load = os.getloadavg()[0]
    say(f"load average {end_load:.2f} at the end")
    if args.json:
        print(json.dumps({"load_start": load, "load_end": end_load, "rows": rows,
                          "summary": summary}, indent=1))  # fmt: skip
    return 0


if __name__ == "__main__":
    sys.exit(main())
