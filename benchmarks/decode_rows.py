"""Where a batched decoding step's time goes: the numpy Decoder's step per row at batch 1, 8
and 32, and the sampler per row (native-only). Run as ``python -m benchmarks.decode_rows``.

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
    from evermind.runtime.generation import GenerationRequest
    from evermind.runtime.scheduler import next_token

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
        rng = random.Random(0)
        for name, request in (
            ("temperature 1, full vocabulary", GenerationRequest("", 1, 1.0)),
            ("temperature 1, top_k 40", GenerationRequest("", 1, 1.0, top_k=40)),
            ("greedy", GenerationRequest("", 1, 0.0)),
        ):
            start = time.perf_counter()
            for i in range(320):
                next_token(logits[i % 32], request, rng)
            per_row = (time.perf_counter() - start) / 320
            print(f"sampling, {name}: {per_row * 1e3:.3f} ms a row")
    return 0


if __name__ == "__main__":
    sys.exit(main())
