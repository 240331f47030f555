"""The host-agnostic half of the GPU port: buffers, kernels, dispatches and plans.

A :class:`Device` wraps one WebGPU device. Two transports implement the handful of raw
calls it needs: ``native.py`` (wgpu-py) and ``browser.py`` (``navigator.gpu`` through
Pyodide). Everything here is plain Python and identical on both hosts.

The model is recorded once and replayed: a :class:`Dispatch` owns its pipeline, its bind
group and its workgroup grid, created when the dispatch is made; a :class:`Plan` is an
ordered list of dispatches that :meth:`Device.submit` encodes into one compute pass. Per
step, Python therefore only chooses *which* plan runs; nothing is re-created.
"""

from __future__ import annotations

import struct
from abc import ABC, abstractmethod
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from evermind.errors import ConfigError, GPUError, ShapeError
from evermind.gpu.shaders import load_shader

# WebGPU buffer usage bits (the spec's GPUBufferUsage values).
MAP_READ = 0x0001
MAP_WRITE = 0x0002
COPY_SRC = 0x0004
COPY_DST = 0x0008
UNIFORM = 0x0040
STORAGE = 0x0080

#: The maximum workgroups along one dispatch dimension under default limits.
MAX_GROUPS_PER_DIM = 65535


@dataclass(eq=False)
class Buffer:
    """A GPU buffer.

    Attributes:
        nbytes: Size in bytes (a multiple of 4).
        usage: WebGPU usage bits.
        label: Name shown in errors and debuggers.
        raw: The transport's buffer object.
    """

    nbytes: int
    usage: int
    label: str
    raw: Any = field(repr=False)
    destroyed: bool = field(default=False, repr=False)


@dataclass(eq=False)
class Kernel:
    """A compiled compute pipeline: one entry point of one shader with its overrides."""

    shader: str
    entry: str
    overrides: tuple[tuple[str, float], ...]
    raw: Any = field(repr=False)


@dataclass(eq=False)
class Dispatch:
    """One recorded dispatch: a kernel, its bound buffers and its workgroup grid."""

    kernel: Kernel
    bindings: tuple[tuple[int, Buffer], ...]
    groups: tuple[int, int, int]
    raw_bind_group: Any = field(repr=False)
    label: str = ""


class Plan:
    """An ordered list of dispatches, recorded once and replayed with :meth:`run`.

    Args:
        device: The device the dispatches belong to.
        label: Name used in errors.
    """

    def __init__(self, device: Device, label: str = "plan") -> None:
        self.device = device
        self.label = label
        self.dispatches: list[Dispatch] = []

    def add(self, dispatch: Dispatch | Iterable[Dispatch]) -> Plan:
        """Appends one dispatch or several, in order; returns the plan for chaining."""
        if isinstance(dispatch, Dispatch):
            self.dispatches.append(dispatch)
        else:
            self.dispatches.extend(dispatch)
        return self

    def run(self) -> None:
        """Encodes every dispatch into one compute pass and submits it."""
        self.device.submit(self.dispatches)

    def __len__(self) -> int:
        return len(self.dispatches)


def grid_1d(n: int, workgroup_size: int) -> tuple[int, int, int]:
    """Workgroup grid covering ``n`` invocations, folded into 2-D past 65,535 groups.

    Shaders using it compute the flat index as
    ``(wid.y * nwg.x + wid.x) * WG + lid.x`` and guard ``index < n``.
    """
    if n < 0 or workgroup_size <= 0:
        raise ShapeError(
            f"grid_1d: expected n >= 0 and workgroup_size > 0, got {n}, {workgroup_size}"
        )
    groups = max(1, -(-n // workgroup_size))
    if groups <= MAX_GROUPS_PER_DIM:
        return (groups, 1, 1)
    rows = -(-groups // MAX_GROUPS_PER_DIM)
    return (MAX_GROUPS_PER_DIM, rows, 1)


def pack_params(*fields: tuple[str, int | float]) -> bytes:
    """Packs a ``Params`` uniform of 4-byte scalars, padded to 16 bytes.

    Args:
        *fields: ``("u32" | "i32" | "f32", value)`` pairs in struct order.

    Example:
        ``pack_params(("u32", n), ("f32", eps))`` for ``struct Params { n: u32, eps: f32 }``.
    """
    codes = {"u32": "I", "i32": "i", "f32": "f"}
    fmt = "<"
    values: list[int | float] = []
    for kind, value in fields:
        if kind not in codes:
            raise ConfigError(f"pack_params: unknown field type {kind!r}; expected u32, i32 or f32")
        fmt += codes[kind]
        values.append(value)
    try:
        data = struct.pack(fmt, *values)
    except struct.error as err:
        raise ConfigError(f"pack_params: cannot pack {fields!r}: {err}") from err
    padding = -len(data) % 16 if data else 16  # uniform buffers are sized in 16-byte units
    return data + bytes(padding)


def _as_bytes_view(data: Any) -> memoryview:
    """A byte-format memoryview over any buffer-protocol object."""
    try:
        view = memoryview(data)
    except TypeError as err:
        raise ShapeError(
            f"expected bytes, bytearray, memoryview, array.array or a numpy array, "
            f"got {type(data).__name__}"
        ) from err
    if not view.c_contiguous:
        raise ShapeError(
            "expected a C-contiguous buffer; copy it first (e.g. numpy.ascontiguousarray)"
        )
    return view.cast("B") if view.format != "B" or view.ndim != 1 else view


def is_cpu_adapter_info(info: Mapping[str, str]) -> bool:
    """Whether adapter information (``Device.adapter_info``) describes a CPU adapter.

    lavapipe reports adapter type ``CPU`` and device ``llvmpipe (...)``; Chromium's
    SwiftShader reports architecture ``swiftshader`` (the browser gives no adapter type).
    """
    if info.get("adapter_type", "").strip().upper() == "CPU":
        return True
    names = " ".join(info.get(key, "") for key in ("architecture", "device", "vendor")).lower()
    return any(word in names for word in ("llvmpipe", "lavapipe", "swiftshader"))


class Device(ABC):
    """One WebGPU device, the same API on both hosts.

    Subclasses implement the ``_raw_*`` transport calls; everything else is shared.
    """

    #: Human-readable adapter information (vendor, architecture, device, backend).
    adapter_info: dict[str, str]
    #: The device's limits that matter for our kernels.
    limits: dict[str, int]
    #: Which transport this is: ``"wgpu-py"`` or ``"browser"``.
    transport: str

    def __init__(self) -> None:
        self._kernels: dict[tuple[str, str, tuple[tuple[str, float], ...]], Kernel] = {}
        self._modules: dict[str, Any] = {}

    @property
    def is_cpu_adapter(self) -> bool:
        """Whether the adapter is a software rasteriser running on the CPU.

        True for Mesa lavapipe (device ``llvmpipe ...`` or adapter type ``CPU``) and for
        Chromium's SwiftShader (architecture or device ``swiftshader``). Launchers use it to
        pick strategies that suit CPUs (no workgroup barriers) over ones that suit GPUs.
        """
        return is_cpu_adapter_info(self.adapter_info)

    # -- transport primitives -------------------------------------------------------------
    @abstractmethod
    def _raw_buffer(self, nbytes: int, usage: int, label: str) -> Any: ...

    @abstractmethod
    def _raw_write(self, raw: Any, offset: int, data: memoryview) -> None: ...

    @abstractmethod
    async def _raw_read(self, raw: Any, offset: int, nbytes: int) -> bytes: ...

    @abstractmethod
    def _raw_module(self, shader: str, source: str) -> Any: ...

    @abstractmethod
    def _raw_pipeline(
        self, module: Any, shader: str, entry: str, overrides: Mapping[str, float]
    ) -> Any: ...

    @abstractmethod
    def _raw_bind_group(self, kernel: Kernel, bindings: Sequence[tuple[int, Buffer]]) -> Any: ...

    @abstractmethod
    def _raw_submit(self, dispatches: Sequence[Dispatch]) -> None: ...

    @abstractmethod
    def _raw_destroy_buffer(self, raw: Any) -> None: ...

    async def _raw_check(self) -> None:  # noqa: B027 - optional hook; native needs none
        """Raises errors the transport reports asynchronously (the browser's); native: none."""

    # -- buffers ---------------------------------------------------------------------------
    def buffer(
        self, nbytes: int, *, label: str = "buffer", usage: int = STORAGE | COPY_SRC | COPY_DST
    ) -> Buffer:
        """Creates a zero-filled buffer of ``nbytes`` (rounded up to a multiple of 4)."""
        if nbytes < 0:
            raise ShapeError(f"buffer {label!r}: size must be >= 0, got {nbytes}")
        size = max(4, (nbytes + 3) // 4 * 4)
        limit = self.limits.get("max_buffer_size", 1 << 28)
        if size > limit:
            raise GPUError(
                f"buffer {label!r}: {size} bytes exceeds this device's max buffer size {limit}; "
                "use a smaller model or batch"
            )
        return Buffer(size, usage, label, self._raw_buffer(size, usage, label))

    def upload(self, data: Any, *, label: str = "buffer", usage: int | None = None) -> Buffer:
        """Creates a storage buffer holding ``data`` (any buffer-protocol object)."""
        view = _as_bytes_view(data)
        buf = self.buffer(
            len(view),
            label=label,
            usage=usage if usage is not None else STORAGE | COPY_SRC | COPY_DST,
        )
        if len(view):
            self.write(buf, view)
        return buf

    def uniform(self, params: bytes, *, label: str = "params") -> Buffer:
        """Creates a uniform buffer from packed bytes (see :func:`pack_params`)."""
        return self.upload(params, label=label, usage=UNIFORM | COPY_DST)

    def write(self, buf: Buffer, data: Any, offset: int = 0) -> None:
        """Writes ``data`` into ``buf`` at byte ``offset`` (both multiples of 4)."""
        view = _as_bytes_view(data)
        if offset % 4 or len(view) % 4:
            raise ShapeError(
                f"write to {buf.label!r}: offset {offset} and size {len(view)} "
                "must be multiples of 4"
            )
        if offset + len(view) > buf.nbytes:
            raise ShapeError(
                f"write to {buf.label!r}: {len(view)} bytes at offset {offset} overflow its "
                f"{buf.nbytes} bytes"
            )
        self._raw_write(buf.raw, offset, view)

    async def read(self, buf: Buffer, nbytes: int | None = None, offset: int = 0) -> bytes:
        """Copies ``nbytes`` of ``buf`` from ``offset`` back to the host (waits for the GPU)."""
        size = buf.nbytes - offset if nbytes is None else nbytes
        if offset < 0 or size < 0 or offset + size > buf.nbytes or offset % 4 or size % 4:
            raise ShapeError(
                f"read of {buf.label!r}: range [{offset}, {offset + size}) is not a 4-aligned "
                f"range inside its {buf.nbytes} bytes"
            )
        await self._raw_check()
        if size == 0:
            return b""
        return await self._raw_read(buf.raw, offset, size)

    async def check(self) -> None:
        """Surfaces any asynchronous WebGPU error now (shader compile, validation, loss).

        Native wgpu-py raises at the failing call; the browser reports errors through
        promises, so this waits for them. :meth:`read` calls it first.
        """
        await self._raw_check()

    def destroy(self, *buffers: Buffer) -> None:
        """Frees buffers now instead of waiting for garbage collection."""
        for buf in buffers:
            if not buf.destroyed:
                self._raw_destroy_buffer(buf.raw)
                buf.destroyed = True

    # -- kernels and dispatches ----------------------------------------------------------
    def kernel(
        self, shader: str, entry: str = "main", overrides: Mapping[str, float] | None = None
    ) -> Kernel:
        """Returns the compute pipeline for ``entry`` of ``shaders/<shader>.wgsl``.

        Pipelines are cached by (shader, entry, overrides), so asking twice is free.

        Raises:
            ShaderCompileError: The WGSL does not compile (file, line and column given).
            GPUError: The pipeline could not be created (bad entry point or override).
        """
        key = (shader, entry, tuple(sorted((overrides or {}).items())))
        cached = self._kernels.get(key)
        if cached is not None:
            return cached
        module = self._modules.get(shader)
        if module is None:
            module = self._raw_module(f"{shader}.wgsl", load_shader(shader))
            self._modules[shader] = module
        raw = self._raw_pipeline(module, shader, entry, dict(key[2]))
        kernel = Kernel(shader, entry, key[2], raw)
        self._kernels[key] = kernel
        return kernel

    def dispatch(
        self,
        kernel: Kernel,
        bindings: Sequence[Buffer] | Mapping[int, Buffer],
        groups: tuple[int, int, int] | int,
        *,
        label: str = "",
    ) -> Dispatch:
        """Records a dispatch: binds buffers to group 0 and fixes the workgroup grid.

        Args:
            kernel: From :meth:`kernel`.
            bindings: Buffers in binding order (0, 1, ...), or a ``{binding: buffer}``
                map when the entry point uses only some bindings of its shader.
            groups: Workgroup counts ``(x, y, z)`` or a single ``x``.
        """
        pairs = (
            tuple(bindings.items()) if isinstance(bindings, Mapping) else tuple(enumerate(bindings))
        )
        grid = (groups, 1, 1) if isinstance(groups, int) else tuple(groups)
        if len(grid) != 3 or any(g < 0 or g > MAX_GROUPS_PER_DIM for g in grid):
            raise ShapeError(
                f"dispatch {kernel.shader}.{kernel.entry}: workgroup grid {grid} must be three "
                f"counts in [0, {MAX_GROUPS_PER_DIM}]"
            )
        for _, buf in pairs:
            if buf.destroyed:
                raise GPUError(
                    f"dispatch {kernel.shader}.{kernel.entry}: buffer {buf.label!r} was destroyed"
                )
        raw = self._raw_bind_group(kernel, pairs)
        return Dispatch(kernel, pairs, (grid[0], grid[1], grid[2]), raw, label)

    def plan(self, label: str = "plan") -> Plan:
        """Starts an empty :class:`Plan` on this device."""
        return Plan(self, label)

    def submit(self, dispatches: Sequence[Dispatch]) -> None:
        """Encodes ``dispatches`` in order into one compute pass and submits it."""
        live = [d for d in dispatches if d.groups[0] and d.groups[1] and d.groups[2]]
        if live:
            self._raw_submit(live)

    async def sync(self) -> None:
        """Waits until all submitted work has finished."""
        probe = self.buffer(4, label="sync-probe")
        await self.read(probe)
        self.destroy(probe)
