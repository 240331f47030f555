"""Native-only helpers for `.evermind` packages: tensors as numpy arrays.

NATIVE ONLY: this module imports numpy, which the browser build does not have. Nothing
browser-safe imports it; the runtime, the CPU reference model and tests do.
"""

from __future__ import annotations

import numpy as np
import numpy.typing as npt

from evermind.package.reader import Package


def tensors_as_numpy(package: Package) -> dict[str, npt.NDArray[np.float32]]:
    """Return the package's tensors as float32 numpy arrays of their shapes.

    Args:
        package: A verified package from :func:`evermind.package.read_package`.

    Returns:
        Tensor name -> a new C-contiguous ``float32`` array with the tensor's shape.
    """
    return {
        name: np.array(tensor.to_float32(), dtype=np.float32).reshape(tensor.shape)
        for name, tensor in package.tensors.items()
    }
