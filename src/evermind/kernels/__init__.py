"""Python side of each WGSL kernel: shapes, bindings, dispatch sizes (``<op>.py``). The numpy
reference each kernel must match is :mod:`evermind.ops` ``.<op>`` (native-only), under the same
name: ``shaders/<op>.wgsl``, ``kernels/<op>.py``, ``ops/<op>.py``, ``tests/shaders/test_<op>.py``.

Launchers return :class:`evermind.gpu.Dispatch` objects: created once, recorded into a
:class:`evermind.gpu.Plan`, replayed every step.
"""
