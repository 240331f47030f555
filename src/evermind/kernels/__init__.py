"""Python side of each WGSL kernel: shapes, bindings, dispatch sizes (``<op>.py``), and the
numpy reference each kernel must match (``<op>_ref.py``, native-only).

Launchers return :class:`evermind.gpu.Dispatch` objects: created once, recorded into a
:class:`evermind.gpu.Plan`, replayed every step.
"""
