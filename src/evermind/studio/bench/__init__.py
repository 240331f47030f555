"""The device benchmarks: what ``evermind bench kernels|train`` runs on a GPU ``Device``.

Browser-safe (standard library and ``evermind`` only), and inside the wheel only because the
Studio tab runs them too (``studio/bench_api.py``: the ``bench_kernels`` / ``bench_train``
calls), so one CLI run can print both transports side by side. Everything that runs only on
the host (numpy and PyTorch references, the headless browser, the report tables, the CLI's
entry point) lives in the checkout's top-level ``benchmarks/`` package, outside the wheel.

- :mod:`.timing`: the median of submit + sync, the adapter's name;
- :mod:`.kernels_dense`, :mod:`.kernels_misc`, :mod:`.kernels_scan`: each kernel family's
  rows (every module named ``kernels_*`` here is one);
- :mod:`.suite`: the nano model, the training step's breakdown, the model's speeds, and the
  two suites the tab and the native run call (``run_kernel_suite``, ``run_model_suite``).
"""
