"""Which device decodes a served model: numpy on the CPU or the GPU through wgpu-py (native-only).

``evermind serve --device cpu|gpu|auto`` (:attr:`RuntimeConfig.device`):

- ``cpu``: the numpy decoder (:mod:`evermind.model.cpu_decode`);
- ``gpu``: :class:`~evermind.model.gpu_decode.GpuBatchDecoder` on whatever adapter wgpu-py
  opens, a CPU/software one included (Mesa's lavapipe: how the tests run it);
- ``auto``: the GPU when wgpu-py finds a real one (not a CPU/software adapter), else numpy.

The process opens one WebGPU device, the first time a GPU is asked for, and every GPU decoder
shares it; each served model's scheduler thread drives its own decoder, so the calls of GPU
decoders go through one lock (the GPU runs one submission at a time anyway, and the port
makes no promise about concurrent use from several threads). :func:`decoder_for` is the
factory the scheduler calls per loaded model.
"""

from __future__ import annotations

import threading
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from evermind.errors import ConfigError, NoAdapterError
from evermind.gpu import Device
from evermind.model.cpu_decode import CpuDecoder
from evermind.model.decode import Decoder

#: The accepted values of ``--device``.
DEVICES = ("cpu", "gpu", "auto")

_lock = threading.Lock()
_device: Device | None = None
_probe: tuple[bool, str] | None = None


@dataclass(frozen=True)
class ServingDevice:
    """The resolved device: ``kind`` ``"cpu"`` or ``"gpu"``, and what it is in words."""

    kind: str
    adapter: str

    def as_dict(self) -> dict[str, str]:
        """``{"kind", "adapter"}`` for ``/healthz``."""
        return {"kind": self.kind, "adapter": self.adapter}


def _describe(device: Device) -> str:
    info = getattr(device, "adapter_info", {}) or {}
    name = info.get("device") or info.get("description") or "unknown adapter"
    backend = info.get("backend", "")
    kind = "CPU adapter" if device.is_cpu_adapter else "GPU"
    return f"{name} ({kind}{', ' + backend if backend else ''}, wgpu-py)"


def gpu_device() -> Device:
    """The process's WebGPU device (opened once, on first use).

    Raises:
        NoAdapterError: wgpu-py is missing or finds no adapter.
    """
    global _device
    with _lock:
        if _device is None:
            from evermind.gpu.native import open_native_device

            _device = open_native_device()
        return _device


def has_real_gpu() -> tuple[bool, str]:
    """Whether wgpu-py finds a GPU that is not a CPU/software adapter, and what it found
    (probed once per process)."""
    global _probe
    if _probe is None:
        try:
            device = gpu_device()
        except NoAdapterError as err:
            _probe = (False, f"no WebGPU adapter ({err})")
        else:
            _probe = (not device.is_cpu_adapter, _describe(device))
    return _probe


def resolve_device(requested: str) -> ServingDevice:
    """What ``--device requested`` serves with.

    Raises:
        ConfigError: ``requested`` is not one of :data:`DEVICES`.
        NoAdapterError: ``gpu`` was asked for and wgpu-py finds no adapter.
    """
    if requested not in DEVICES:
        raise ConfigError(
            f"device must be one of {', '.join(DEVICES)}, got {requested!r}; hint: 'auto' "
            "uses a real GPU when wgpu-py finds one, else numpy"
        )
    if requested == "cpu":
        return ServingDevice("cpu", "numpy")
    if requested == "gpu":
        return ServingDevice("gpu", _describe(gpu_device()))
    real, found = has_real_gpu()
    return ServingDevice("gpu", found) if real else ServingDevice("cpu", f"numpy ({found})")


_gpu_calls = threading.Lock()


class SharedGpuDecoder:
    """A GPU decoder whose calls hold the lock of the shared device (one thread at a time).

    Attributes:
        inner: The wrapped :class:`~evermind.model.gpu_decode.GpuBatchDecoder`.
    """

    def __init__(self, inner: Decoder) -> None:
        self.inner = inner
        self.slots, self.vocab_size = inner.slots, inner.vocab_size

    def prefill(self, slots: Sequence[int], prompts: Sequence[Sequence[int]]) -> Any:
        """See :meth:`Decoder.prefill`."""
        with _gpu_calls:
            return self.inner.prefill(slots, prompts)

    def step(self, slots: Sequence[int], tokens: Sequence[int]) -> Any:
        """See :meth:`Decoder.step`."""
        with _gpu_calls:
            return self.inner.step(slots, tokens)

    def release(self, slot: int) -> None:
        """See :meth:`Decoder.release`."""
        with _gpu_calls:
            self.inner.release(slot)


def decoder_for(model: Any, device: str, slots: int) -> Decoder:
    """A :class:`~evermind.model.decode.Decoder` of ``slots`` sequences for a loaded model.

    Args:
        model: A loaded :class:`evermind.model.inference.Model` (its ``config`` and its numpy
            weights ``model.cpu.params`` by Hugging Face name are used).
        device: ``cpu``, ``gpu`` or ``auto`` (see the module docstring).
        slots: Sequences decoded at once.

    Raises:
        ConfigError: ``device`` or ``slots`` is invalid.
        NoAdapterError: ``gpu`` was asked for and wgpu-py finds no adapter.
    """
    if resolve_device(device).kind == "gpu":
        from evermind.model.gpu_decode import GpuBatchDecoder

        with _gpu_calls:
            inner = GpuBatchDecoder.from_params(gpu_device(), model.config, model.cpu.params, slots)
        return SharedGpuDecoder(inner)
    return CpuDecoder(model, slots)
