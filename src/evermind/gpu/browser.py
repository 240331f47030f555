"""The browser GPU transport: ``navigator.gpu`` through Pyodide (browser-only module).

This is the only GPU module that imports ``js`` and ``pyodide.ffi`` (the one other importer
is :mod:`evermind.studio.idb`, IndexedDB). JS objects are named ``js_*``; every
``create_proxy`` is destroyed. WebGPU in the browser reports shader and validation errors
asynchronously, so they are collected here and raised by :meth:`Device.check` (which every
read calls first).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from js import GPUMapMode, Object, navigator
from pyodide.ffi import create_proxy, to_js

from evermind.errors import DeviceLostError, GPUError, NoAdapterError, ShaderCompileError
from evermind.gpu.base import COPY_DST, MAP_READ, Buffer, Device, Dispatch, Kernel

_NO_WEBGPU_HINT = (
    "use a browser with WebGPU: Chrome/Edge 113+ (on Linux start Chromium with "
    "--enable-unsafe-webgpu, headless adds --enable-unsafe-swiftshader), Safari 26+, or "
    "Firefox 141+ on Windows"
)


def _missing(js_value: Any) -> bool:
    """Whether a JS value is absent: ``None`` (undefined) or Pyodide's ``jsnull`` (JS null)."""
    return js_value is None or type(js_value).__name__ == "JsNull"


def _js(value: Any) -> Any:
    """Converts nested Python dicts/lists to plain JS objects/arrays."""
    return to_js(value, dict_converter=Object.fromEntries)


class BrowserDevice(Device):
    """A :class:`Device` backed by the page's (or worker's) ``navigator.gpu``."""

    transport = "browser"

    def __init__(self, js_adapter: Any, js_device: Any, adapter_info: dict[str, str]) -> None:
        super().__init__()
        self.js_adapter = js_adapter
        self.js_device = js_device
        self.js_queue = js_device.queue
        self.adapter_info = adapter_info
        lim = js_device.limits
        self.limits = {
            "max_buffer_size": int(lim.maxBufferSize),
            "max_storage_buffer_binding_size": int(lim.maxStorageBufferBindingSize),
            "max_compute_workgroup_storage_size": int(lim.maxComputeWorkgroupStorageSize),
            "max_compute_invocations_per_workgroup": int(lim.maxComputeInvocationsPerWorkgroup),
            "max_storage_buffers_per_shader_stage": int(lim.maxStorageBuffersPerShaderStage),
        }
        self._pending_modules: list[tuple[str, Any]] = []
        self._errors: list[str] = []
        self._lost: str | None = None
        self._on_error = create_proxy(self._record_error)
        js_device.addEventListener("uncapturederror", self._on_error)
        self._on_lost = create_proxy(self._record_lost)
        js_device.lost.then(self._on_lost)

    def _record_error(self, js_event: Any) -> None:
        self._errors.append(str(js_event.error.message))

    def _record_lost(self, js_info: Any) -> None:
        self._lost = f"{js_info.reason}: {js_info.message}"

    def close(self) -> None:
        """Destroys the device and the proxies this transport created."""
        self.js_device.removeEventListener("uncapturederror", self._on_error)
        self.js_device.destroy()
        self._on_error.destroy()
        self._on_lost.destroy()

    async def _raw_check(self) -> None:
        if self._lost is not None:
            raise DeviceLostError(f"WebGPU device lost ({self._lost}); reload to get a new one")
        pending, self._pending_modules = self._pending_modules, []
        for shader, js_module in pending:
            js_info = await js_module.getCompilationInfo()
            for js_msg in js_info.messages:
                if js_msg.type == "error":
                    raise ShaderCompileError(
                        shader, int(js_msg.lineNum), int(js_msg.linePos), str(js_msg.message)
                    )
        if self._errors:
            first, self._errors = self._errors[0], []
            raise GPUError(f"WebGPU validation error: {first}")

    def _raw_buffer(self, nbytes: int, usage: int, label: str) -> Any:
        return self.js_device.createBuffer(_js({"size": nbytes, "usage": usage, "label": label}))

    def _raw_write(self, raw: Any, offset: int, data: memoryview) -> None:
        # Zero-copy: a typed-array view into wasm memory, copied by writeBuffer at once.
        proxy = create_proxy(data)
        try:
            view = proxy.getBuffer("u8")
            try:
                self.js_queue.writeBuffer(raw, offset, view.data)
            finally:
                view.release()
        finally:
            proxy.destroy()

    async def _raw_read(self, raw: Any, offset: int, nbytes: int) -> bytes:
        js_staging = self.js_device.createBuffer(
            _js({"size": nbytes, "usage": MAP_READ | COPY_DST, "label": "readback"})
        )
        js_encoder = self.js_device.createCommandEncoder()
        js_encoder.copyBufferToBuffer(raw, offset, js_staging, 0, nbytes)
        self.js_queue.submit(to_js([js_encoder.finish()]))
        try:
            await js_staging.mapAsync(GPUMapMode.READ)
        except Exception as err:  # a JsException; the device may have been lost
            await self._raw_check()
            raise GPUError(f"reading back {nbytes} bytes failed: {err}") from err
        data: bytes = js_staging.getMappedRange().to_bytes()
        js_staging.unmap()
        js_staging.destroy()
        return data

    def _raw_destroy_buffer(self, raw: Any) -> None:
        raw.destroy()

    def _raw_module(self, shader: str, source: str) -> Any:
        js_module = self.js_device.createShaderModule(_js({"code": source, "label": shader}))
        self._pending_modules.append((shader, js_module))
        return js_module

    def _raw_pipeline(
        self, module: Any, shader: str, entry: str, overrides: Mapping[str, float]
    ) -> Any:
        compute: dict[str, Any] = {"module": module, "entryPoint": entry}
        if overrides:
            compute["constants"] = dict(overrides)
        return self.js_device.createComputePipeline(
            _js({"layout": "auto", "compute": compute, "label": f"{shader}.{entry}"})
        )

    def _raw_bind_group(self, kernel: Kernel, bindings: Sequence[tuple[int, Buffer]]) -> Any:
        entries = [
            {"binding": index, "resource": {"buffer": buf.raw, "offset": 0, "size": buf.nbytes}}
            for index, buf in bindings
        ]
        return self.js_device.createBindGroup(
            _js({"layout": kernel.raw.getBindGroupLayout(0), "entries": entries})
        )

    def _raw_submit(self, dispatches: Sequence[Dispatch]) -> None:
        js_encoder = self.js_device.createCommandEncoder()
        js_pass = js_encoder.beginComputePass()
        set_pipeline, set_bind_group = js_pass.setPipeline, js_pass.setBindGroup
        dispatch = js_pass.dispatchWorkgroups
        for d in dispatches:
            set_pipeline(d.kernel.raw)
            set_bind_group(0, d.raw_bind_group)
            dispatch(*d.groups)
        js_pass.end()
        self.js_queue.submit(to_js([js_encoder.finish()]))


async def open_browser_device() -> BrowserDevice:
    """Requests an adapter and a device from ``navigator.gpu``.

    Raises:
        NoAdapterError: WebGPU is missing or returned no adapter; the message says which
            browser or flag to use.
    """
    js_gpu: Any = getattr(navigator, "gpu", None)
    if _missing(js_gpu):
        raise NoAdapterError(f"this browser has no navigator.gpu (WebGPU); {_NO_WEBGPU_HINT}")
    js_adapter = await js_gpu.requestAdapter(_js({"powerPreference": "high-performance"}))
    # Pyodide 314 turns JS null into ``jsnull``, not None: without a check for both the
    # page died on ``'JsNull' object has no attribute 'requestDevice'``.
    if _missing(js_adapter):
        raise NoAdapterError(f"navigator.gpu.requestAdapter() returned null; {_NO_WEBGPU_HINT}")
    try:
        js_device = await js_adapter.requestDevice(_js({"label": "evermind"}))
    except Exception as err:  # a JsException: the adapter refused a device
        raise NoAdapterError(
            f"the WebGPU adapter gave no device ({err}); {_NO_WEBGPU_HINT}"
        ) from err
    js_info = js_adapter.info
    info = {
        "vendor": str(js_info.vendor),
        "architecture": str(js_info.architecture),
        "device": str(js_info.device),
        "description": str(js_info.description),
        "adapter_type": "",
        "backend": "WebGPU (browser)",
    }
    return BrowserDevice(js_adapter, js_device, info)
