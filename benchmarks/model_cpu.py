"""Benchmark the numpy CPU model against Hugging Face transformers on the same weights.

Measures, for the nano preset (d_model 128, 4 layers, vocab 4096, batch 1):
- recurrent decoding: tokens/s of greedy ``CpuMamba.step`` (argmax included) versus
  ``MambaForCausalLM.generate`` (greedy, same weights, its cached recurrent path);
- embedding latency of one 64-token text: ``CpuMamba.embed`` versus the transformers backbone
  forward + masked mean + L2 normalisation.
Absolute numbers depend on the machine (and on other load); the ratios are what to read.

Usage: .venv/bin/python -m benchmarks.model_cpu [--tokens 256] [--repeats 20]
"""

from __future__ import annotations

import argparse
import time
from collections.abc import Callable

import numpy as np

from evermind.model import MambaConfig, init_params
from evermind.model.cpu import CpuMamba


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


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--tokens", type=int, default=256, help="tokens decoded per run")
    parser.add_argument("--repeats", type=int, default=20, help="runs per measurement (best)")
    args = parser.parse_args()

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
