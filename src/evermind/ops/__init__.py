"""The ONE numpy forward and backward of every op (native-only package: every module imports numpy).

Each op has one name shared by its shader, launcher, reference and test::

    shaders/<op>.wgsl   kernels/<op>.py   ops/<op>.py   tests/shaders/test_<op>.py

Ops: elementwise, rmsnorm, conv1d, selective_scan, recurrent_step, cross_entropy, embedding,
matmul, pool, topk, grad_norm, adamw. Each function follows the kernel's convention (argument
order, layouts, raw ``delta``/``A_log`` for the scan), so a kernel test compares its output
directly; the CPU model (:mod:`evermind.model.cpu`), the CPU trainers and the embedding
objectives are built from the same functions. Unless a docstring says otherwise a function
computes in float64 and returns the floating dtype of its inputs (float32 in, float32 out;
float64 in, float64 out, for finite-difference checks).

One op has its reference ahead of its kernel: ``ssd``, Mamba-2's state-space-dual scan (chunked
forward, the loop over time it is checked against, and the backward); its shader is still to
come (``tests/unit/test_one_reference.py`` lists it in ``PENDING_KERNELS``), and so has ``moe``, the
cortex (a shared-expert mixture-of-experts FFN after the mixer: router, top-k, SwiGLU experts,
the load-balancing loss). ``rmsnorm`` also
holds Mamba-2's gated, grouped variant (``rmsnorm_gated_fwd`` / ``_bwd``).

One op has a fast CPU path beside its reference: ``selective_scan_fast`` (same arguments, the
arithmetic in a ``compute`` dtype), which CPU training runs and
``tests/unit/test_selective_scan_fast.py`` checks against ``selective_scan``.

This package imports nothing itself, so ``import evermind.ops`` is browser-safe; import the
op modules (``from evermind.ops import rmsnorm``) only on native hosts.
"""
