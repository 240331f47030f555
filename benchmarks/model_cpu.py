"""Benchmark the numpy CPU model against Hugging Face transformers on the same weights.

Measures, for the nano preset (d_model 128, 4 layers, vocab 4096, batch 1):
- recurrent decoding: tokens/s of greedy ``CpuMamba.step`` (argmax included) versus
  ``MambaForCausalLM.generate`` (greedy, same weights, its cached recurrent path);
- embedding latency of one 64-token text: ``CpuMamba.embed`` versus the transformers backbone
  forward + masked mean + L2 normalisation.
Absolute numbers depend on the machine (and on other load); the ratios are what to read.

``--train`` measures training instead, at ``evermind train --device cpu``'s defaults (nano,
batch 4, seq_len 128, vocab 2048): the scan alone (forward + backward at that shape and at
the embedder tuning's, 64 views of 40 tokens) and one ``CpuBackend`` step, each with the fast
scan (:mod:`evermind.ops.selective_scan_fast`, what training runs) and with the reference
(:mod:`evermind.ops.selective_scan`), interleaved round by round so that both see the same load.

Usage: .venv/bin/python -m benchmarks.model_cpu [--tokens 256] [--repeats 20] [--train]
"""

from __future__ import annotations

import argparse
import asyncio
import time
from collections.abc import Callable

import numpy as np

from evermind.model import MambaConfig, init_params
from evermind.model.cpu import CpuMamba
from evermind.ops.selective_scan import selective_scan_bwd, selective_scan_fwd
from evermind.ops.selective_scan_fast import selective_scan_fast_bwd, selective_scan_fast_fwd
from evermind.train.cpu_backend import CpuBackend
from evermind.train.loop import TrainConfig


def best_of(repeats: int, run: Callable[[], object]) -> float:
    """The fastest of ``repeats`` runs, in seconds (the least disturbed by other load)."""
    times = []
    for _ in range(repeats):
        start = time.perf_counter()
        run()
        times.append(time.perf_counter() - start)
    return min(times)


def bench_ours(model: CpuMamba, tokens: int, repeats: int, ids: np.ndarray) -> tuple[float, float]:
    def decode() -> None:
        state = model.init_state(1)
        token = np.array([1])
        for _ in range(tokens):
            logits, state = model.step(token, state)
            token = logits.argmax(axis=-1)

    decode()  # warm-up
    step_seconds = best_of(max(repeats // 4, 3), decode)
    mask = np.ones_like(ids, dtype=bool)
    model.embed(ids, mask)
    embed_seconds = best_of(repeats, lambda: model.embed(ids, mask))
    return tokens / step_seconds, embed_seconds


def bench_hf(model: CpuMamba, tokens: int, repeats: int, ids: np.ndarray) -> tuple[float, float]:
    import torch
    import transformers

    transformers.logging.set_verbosity_error()
    hf = transformers.MambaForCausalLM(transformers.MambaConfig(**model.config.to_hf_config()))
    hf.load_state_dict({n: torch.from_numpy(v.copy()) for n, v in model.params.items()}, False)
    hf.eval()
    prompt = torch.tensor([[1]])

    def decode() -> None:
        hf.generate(
            prompt,
            max_new_tokens=tokens,
            min_new_tokens=tokens,
            do_sample=False,
            pad_token_id=model.config.pad_token_id,
        )

    with torch.inference_mode():
        decode()
        step_seconds = best_of(max(repeats // 4, 3), decode)
        ids_t = torch.from_numpy(ids)
        mask_t = torch.ones_like(ids_t, dtype=torch.float32)

        def embed() -> None:
            hidden = hf.backbone(ids_t).last_hidden_state  # after norm_f
            pooled = (hidden * mask_t[..., None]).sum(1) / mask_t.sum(1, keepdim=True)
            torch.nn.functional.normalize(pooled, dim=-1)

        embed()
        embed_seconds = best_of(repeats, embed)
    return tokens / step_seconds, embed_seconds


def scan_inputs(batch: int, length: int, d_inner: int, d_state: int) -> list[np.ndarray]:
    """float32 scan inputs (x, delta_raw, A_log, B, C, D) at one shape, A_log as at init."""
    rng = np.random.default_rng(0)
    a_log = np.log(np.tile(np.arange(1, d_state + 1, dtype=np.float64), (d_inner, 1)))
    x, delta_raw = rng.standard_normal((2, batch, length, d_inner))
    B, C = rng.standard_normal((2, batch, length, d_state))
    arrays = [x, delta_raw - 1.0, a_log, B, C, rng.standard_normal(d_inner)]
    return [a.astype(np.float32) for a in arrays]


def scan_runs(shape: tuple[int, int, int, int]) -> dict[str, Callable[[], object]]:
    """Forward + backward of the scan at ``shape``: the fast path and the reference."""
    args = scan_inputs(*shape)
    dy = np.ones_like(args[0])

    def fast() -> None:
        _, states = selective_scan_fast_fwd(*args, compute=np.float32)
        selective_scan_fast_bwd(dy, *args, states, np.float32)

    def reference() -> None:
        _, states = selective_scan_fwd(*args)
        selective_scan_bwd(dy, *args, states)

    return {"fast": fast, "reference": reference}


def train_runs() -> dict[str, Callable[[], object]]:
    """One ``CpuBackend`` step at the CLI's defaults, on the fast scan and on the reference."""
    config = MambaConfig.preset("nano", vocab_size=2048)
    train = TrainConfig(batch_size=4, seq_len=128, lr=3e-3)
    ids = np.random.default_rng(0).integers(0, config.vocab_size, (4, 129)).astype(np.int32)
    batch = (ids[:, :-1].tobytes(), ids[:, 1:].tobytes())
    runs: dict[str, Callable[[], object]] = {}
    for name in ("fast", "reference"):
        backend = CpuBackend(config, init_params(config, 0), train)
        backend.model.reference_scan = name == "reference"
        steps = iter(range(1, 1 << 30))
        runs[name] = lambda b=backend, s=steps: asyncio.run(b.train_step([batch], 3e-3, next(s)))
    return runs


def bench_train(rounds: int, repeats: int) -> None:
    """Prints, per measurement, the best time of each scan per round and the ratios' range."""
    cases = {
        "scan fwd+bwd (training: B4 L128 I256 N16, float32)": scan_runs((4, 128, 256, 16)),
        "scan fwd+bwd (tuning: 64 views x 40 tokens)": scan_runs((64, 40, 256, 16)),
        "CpuBackend.train_step (evermind train --device cpu defaults)": train_runs(),
    }
    for what, runs in cases.items():
        times: dict[str, list[float]] = {name: [] for name in runs}
        for _ in range(rounds):
            for name, run in runs.items():
                times[name].append(best_of(repeats, run))
        ratios = [r / f for r, f in zip(times["reference"], times["fast"], strict=True)]
        print(what)
        for name, seconds in times.items():
            print(f"  {name:9s}: " + ", ".join(f"{1e3 * t:.1f}" for t in seconds) + " ms")
        print(f"  reference / fast: {min(ratios):.2f} to {max(ratios):.2f}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--tokens", type=int, default=256, help="tokens decoded per run")
    parser.add_argument("--repeats", type=int, default=20, help="runs per measurement (best)")
    parser.add_argument("--train", action="store_true", help="the scan and the training step")
    parser.add_argument("--rounds", type=int, default=3, help="--train: interleaved rounds")
    args = parser.parse_args()
    if args.train:
        bench_train(args.rounds, max(1, args.repeats // 4))
        return

    config = MambaConfig.preset("nano", vocab_size=4096)
    model = CpuMamba(config, init_params(config, 0))
    ids = np.random.default_rng(0).integers(0, config.vocab_size, (1, 64))
    print(f"nano preset: {config.n_params:,} params, vocab {config.vocab_size}, batch 1")

    ours_tps, ours_embed = bench_ours(model, args.tokens, args.repeats, ids)
    print(f"numpy  step  : {ours_tps:8.0f} tokens/s")
    print(f"numpy  embed : {ours_embed * 1e3:8.2f} ms (64 tokens)")
    try:
        import torch

        hf_tps, hf_embed = bench_hf(model, args.tokens, args.repeats, ids)
    except ImportError as err:
        print(f"transformers comparison skipped: {err}")
        return
    print(
        f"HF     step  : {hf_tps:8.0f} tokens/s (generate, greedy; torch threads "
        f"{torch.get_num_threads()})"
    )
    print(f"HF     embed : {hf_embed * 1e3:8.2f} ms (64 tokens)")
    print(
        f"ratio numpy/HF: step speed x{ours_tps / hf_tps:.2f}, "
        f"embed speed x{hf_embed / ours_embed:.2f}"
    )


if __name__ == "__main__":
    main()
