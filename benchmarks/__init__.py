"""Speed measurements of Evermind, outside the installed package (a checkout's top level).

Nothing in ``src/evermind`` imports this package: the wheel does not carry it, and the
library never needs it at run time. What runs on a GPU ``Device`` (the kernel rows, the
training step's breakdown, the GPU model's speeds, the timing helpers) stays in the wheel as
:mod:`evermind.studio.bench`, because the Studio tab runs it too; everything here builds on it.

- :mod:`benchmarks.report`: ``evermind bench kernels|train`` (both transports, one table);
- :mod:`benchmarks.host`: the numpy and PyTorch references, the headless browser run;
- :mod:`benchmarks.serve`: ``evermind bench serve``, the runtime on loopback;
- :mod:`benchmarks.gateway`: ``evermind bench gateway``, the caching gateway's replay;
- :mod:`benchmarks.memory`, :mod:`benchmarks.memory_tab`: recall and cache-lookup latency
  (natively, and in the Studio tab);
- :mod:`benchmarks.model_cpu`: the numpy CPU model's step and generation (``--train``: the
  scan alone and the training step, fast scan against the reference);
- :mod:`benchmarks.tokenizer`: BPE training and encoding against HF ``tokenizers``;
- :mod:`benchmarks.blocks`: ``evermind bench blocks``, block types at equal parameter count
  (held-out loss and training tokens/s on the CPU, wgpu-py and the browser).

Each script runs as ``python -m benchmarks.<name> --help`` from the checkout's root.
:func:`main` (``python -m benchmarks``) is the one entry point of ``evermind bench``: the CLI
(``evermind.cli.bench``) finds the checkout and runs ``python -m benchmarks`` from it as a
child process, forwarding the words after ``bench``.
"""

from __future__ import annotations

from collections.abc import Sequence


def main(argv: Sequence[str] | None = None) -> int:
    """``evermind bench kernels|train|serve [options]``; returns the exit status.

    Raises:
        EvermindError: Conflicting options, or the bundle for the browser run cannot be built
            (the CLI prints it as one ``error:`` line and exits 2).
    """
    from benchmarks import report

    return report.run(argv)
