"""The native GPU transport: WebGPU through wgpu-py (native-only module).

This is the only module that imports ``wgpu``. On machines without a GPU, wgpu-py finds
Mesa's lavapipe (Debian package ``mesa-vulkan-drivers``) and runs the shaders on the CPU.
"""

from __future__ import annotations

import os
import re
import tempfile
from collections.abc import Mapping, Sequence
from typing import Any

from evermind.errors import GPUError, NoAdapterError, ShaderCompileError
from evermind.gpu.base import Buffer, Device, Dispatch, Kernel

# naga's codespan report points at the error with "┌─ wgsl:LINE:COL".
_SPAN = re.compile(r"wgsl:(\d+):(\d+)")


def _quiet_wayland() -> None:
    # libwayland-client prints "XDG_RUNTIME_DIR is invalid" on every adapter enumeration
    # when the variable is unset (headless machines); any existing directory silences it.
    if not os.environ.get("XDG_RUNTIME_DIR"):
        os.environ["XDG_RUNTIME_DIR"] = tempfile.mkdtemp(prefix="evermind-xdg-")


class NativeDevice(Device):
    """A :class:`Device` backed by wgpu-py."""

    transport = "wgpu-py"

    def __init__(self, wgpu: Any, raw_device: Any, adapter_info: dict[str, str]) -> None:
        super().__init__()
        self._wgpu = wgpu
        self.raw = raw_device
        self.adapter_info = adapter_info
        lim = raw_device.limits
        self.limits = {
            "max_buffer_size": int(lim["max-buffer-size"]),
            "max_storage_buffer_binding_size": int(lim["max-storage-buffer-binding-size"]),
            "max_compute_workgroup_storage_size": int(lim["max-compute-workgroup-storage-size"]),
            "max_compute_invocations_per_workgroup": int(
                lim["max-compute-invocations-per-workgroup"]
            ),
            "max_storage_buffers_per_shader_stage": int(
                lim["max-storage-buffers-per-shader-stage"]
            ),
        }

    def _raw_buffer(self, nbytes: int, usage: int, label: str) -> Any:
        return self.raw.create_buffer(size=nbytes, usage=usage, label=label)

    def _raw_write(self, raw: Any, offset: int, data: memoryview) -> None:
        self.raw.queue.write_buffer(raw, offset, data)

    async def _raw_read(self, raw: Any, offset: int, nbytes: int) -> bytes:
        return bytes(self.raw.queue.read_buffer(raw, offset, nbytes))

    def _raw_destroy_buffer(self, raw: Any) -> None:
        raw.destroy()

    def _raw_module(self, shader: str, source: str) -> Any:
        try:
            return self.raw.create_shader_module(code=source, label=shader)
        except self._wgpu.GPUValidationError as err:
            text = str(err)
            match = _SPAN.search(text)
            line, col = (int(match.group(1)), int(match.group(2))) if match else (0, 0)
            raise ShaderCompileError(shader, line, col, text.strip()) from err

    def _raw_pipeline(
        self, module: Any, shader: str, entry: str, overrides: Mapping[str, float]
    ) -> Any:
        compute: dict[str, Any] = {"module": module, "entry_point": entry}
        if overrides:
            compute["constants"] = dict(overrides)
        try:
            return self.raw.create_compute_pipeline(
                layout="auto", compute=compute, label=f"{shader}.{entry}"
            )
        except self._wgpu.GPUError as err:
            raise GPUError(f"cannot create pipeline {shader}.wgsl:{entry}: {err}") from err

    def _raw_bind_group(self, kernel: Kernel, bindings: Sequence[tuple[int, Buffer]]) -> Any:
        entries = [
            {"binding": index, "resource": {"buffer": buf.raw, "offset": 0, "size": buf.nbytes}}
            for index, buf in bindings
        ]
        try:
            return self.raw.create_bind_group(
                layout=kernel.raw.get_bind_group_layout(0), entries=entries
            )
        except self._wgpu.GPUError as err:
            names = ", ".join(f"{i}={b.label}" for i, b in bindings)
            raise GPUError(
                f"cannot bind ({names}) to {kernel.shader}.wgsl:{kernel.entry}: {err}"
            ) from err

    def _raw_submit(self, dispatches: Sequence[Dispatch]) -> None:
        encoder = self.raw.create_command_encoder()
        compute_pass = encoder.begin_compute_pass()
        for d in dispatches:
            compute_pass.set_pipeline(d.kernel.raw)
            compute_pass.set_bind_group(0, d.raw_bind_group)
            compute_pass.dispatch_workgroups(*d.groups)
        compute_pass.end()
        self.raw.queue.submit([encoder.finish()])


def open_native_device(power_preference: str = "high-performance") -> NativeDevice:
    """Opens a WebGPU device through wgpu-py.

    Raises:
        NoAdapterError: wgpu-py is missing or finds no adapter (hint: install
            ``mesa-vulkan-drivers`` for a CPU adapter).
    """
    _quiet_wayland()
    try:
        import wgpu
    except ImportError as err:
        raise NoAdapterError(
            "wgpu-py is not installed; install the 'gpu' extra: pip install 'evermind-memory[gpu]'"
        ) from err
    try:
        adapter = wgpu.gpu.request_adapter_sync(power_preference=power_preference)
    except Exception as err:  # wgpu raises several types here depending on the backend
        raise NoAdapterError(
            f"wgpu-py found no WebGPU adapter ({err}); on a machine without a GPU install "
            "Mesa's lavapipe: apt-get install mesa-vulkan-drivers"
        ) from err
    if adapter is None:
        raise NoAdapterError(
            "wgpu-py found no WebGPU adapter; on a machine without a GPU install Mesa's "
            "lavapipe: apt-get install mesa-vulkan-drivers"
        )
    info = adapter.info
    adapter_info = {
        "vendor": str(info.get("vendor", "")),
        "architecture": str(info.get("architecture", "")),
        "device": str(info.get("device", "")),
        "description": str(info.get("description", "")),
        "adapter_type": str(info.get("adapter_type", "")),
        "backend": str(info.get("backend_type", "")),
    }
    raw_device = adapter.request_device_sync(label="evermind")
    return NativeDevice(wgpu, raw_device, adapter_info)
