'''Speed measurements of Evermind, outside the installed package (a checkout's top level).

Nothing in ``src/evermind`` imports this package: the wheel does not carry it, and the
library never needs it at run time. What runs on a GPU ``Device`` (the kernel rows, the
training step's breakdown, the GPU model's speeds, the timing helpers) stays in the wheel as
:mod:`evermind.studio.bench`, because the Studio tab runs it too; everything here builds on it.

- :mod:`benchmarks.report`: ``evermind bench kernels|train`` (both transports, one table);
- :mod:`benchmarks.host`: the numpy and PyTorch references, the headless browser run;
- :mod:`benchmarks.serve`: ``evermind bench serve``, the runtime on loopback;
- :mod:`benchmarks.memory`, :mod:`benchmarks.memory_tab`: recall and cache-lookup latency
  (natively, and in the Studio tab);
- :mod:`benchmarks.model_cpu`: the numpy CPU model's step and generation;
- :mod:`benchmarks.tokenizer`: BPE training and encoding against HF ``tokenizers``.

Each script runs as ``python -m benchmarks.<name> --help`` from the checkout's root.
:func:`main` is the one entry point of ``evermind bench``: the CLI forwards the words after
``bench`` to it. The CLI's side (paste into the ``bench`` command; ``main`` raises
``EvermindError``, which the CLI prints as ``error: ...`` with exit status 2)::

    def cmd_bench(argv: list[str]) -> int:
        """``evermind bench ...``: runs the checkout's ``benchmarks`` package (not in the wheel)."""
        root = Path(evermind.__file__).resolve().parents[2]  # the checkout, in an editable install
        if not (root / "benchmarks" / "__init__.py").is_file():
            raise EvermindError(
                "evermind bench runs from a source checkout (its benchmarks/ folder is not "
                f"installed; none at {root}); clone the repository and `pip install -e .` there"
            )
        if str(root) not in sys.path:
            sys.path.insert(0, str(root))
        import benchmarks

        return benchmarks.main(argv)

    # in build_parser(): every word after `bench` (options and --help too) goes to main
    bench = sub.add_parser(
        "bench",
        add_help=False,
        prefix_chars="\\0",
        help="benchmark kernels, the model or the runtime (from a checkout; bench --help)",
    )
    bench.add_argument("argv", nargs="*")
    bench.set_defaults(func=lambda args: cmd_bench(args.argv))
'''

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
