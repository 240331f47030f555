"""Where a batched decoding step's time goes: the numpy Decoder's step per row at batch 1, 8
and 32, and the sampler per row, row by row (the tab's pure-Python one) and batched
(:func:`evermind.model.sampling_rows.sample_rows`, what the runtime's scheduler runs) at
batch 32 (native-only). Run as ``python -m benchmarks.decode_rows``.

The nano config (d_model 128, 4 layers, 2048-token vocabulary), untrained weights (they cost
the same), one BLAS thread as ``evermind serve`` runs.
"""

from __future__ import annotations

import random
import sys
import time

from benchmarks.host import blas_threads


def main() -> int:
    """Prints one line per measurement."""
    from evermind.model import MambaConfig, init_params
    from evermind.model.cpu import CpuMamba
    from evermind.model.cpu_decode import CpuDecoder
    from evermind.model.sampling import sample
    from evermind.model.sampling_rows import sample_rows

    config = MambaConfig(d_model=128, n_layer=4, vocab_size=2048)
    decoder = CpuDecoder(CpuMamba(config, init_params(config, 0)), 32)
    with blas_threads(1) as note:
        print(note)
        logits = None
        for batch in (1, 8, 32):
            slots = list(range(batch))
            decoder.prefill(slots, [[1, 2, 3, 4, 5]] * batch)
            start = time.perf_counter()
            for _ in range(100):
                logits = decoder.step(slots, [3] * batch)
            step = (time.perf_counter() - start) / 100
            print(f"batch {batch}: step {step * 1e3:.2f} ms ({step / batch * 1e3:.3f} ms a row)")
        assert logits is not None
        rows = logits.tolist()
        for name, temperature, top_k, top_p in (
            ("temperature 1, full vocabulary", 1.0, None, None),
            ("temperature 0.8, top_k 40, top_p 0.95", 0.8, 40, 0.95),
            ("greedy", 0.0, None, None),
        ):
            rng = random.Random(0)
            start = time.perf_counter()
            for i in range(64):
                sample(rows[i % 32], temperature, top_k, top_p, rng)
            one = (time.perf_counter() - start) / 64
            rngs = [random.Random(i) for i in range(32)]
            start = time.perf_counter()
            for _ in range(10):
                sample_rows(logits, [temperature] * 32, [top_k] * 32, [top_p] * 32, rngs)
            batched = (time.perf_counter() - start) / 320
            print(
                f"sampling, {name}: {one * 1e3:.3f} ms a row one by one (pure Python), "
                f"{batched * 1e3:.3f} ms a row batched (numpy, batch 32)"
            )
    return 0


if __name__ == "__main__":
    sys.exit(main())
