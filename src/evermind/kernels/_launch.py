"""Small helpers shared by the kernel launchers (argument checks, f32 sizes, strategies)."""

from __future__ import annotations

from evermind.errors import ConfigError, ShapeError
from evermind.gpu import Buffer, Device

#: Row-reduction strategies: ``"tree"`` (a workgroup per row, reduced through workgroup
#: memory: suits GPUs), ``"row_serial"`` (an invocation per row looping over it: no barriers,
#: suits CPU adapters) and ``"auto"`` (row-serial on a CPU adapter, tree otherwise).
ROW_STRATEGIES = ("auto", "tree", "row_serial")


def resolve_row_strategy(op: str, device: Device, strategy: str) -> str:
    """Returns ``"tree"`` or ``"row_serial"`` for ``strategy`` on ``device``.

    Raises:
        ConfigError: ``strategy`` is not one of :data:`ROW_STRATEGIES`.
    """
    if strategy not in ROW_STRATEGIES:
        raise ConfigError(
            f"{op}: strategy must be one of {', '.join(ROW_STRATEGIES)}, got {strategy!r}; "
            "hint: 'auto' picks row_serial on CPU adapters and tree on GPUs"
        )
    if strategy == "auto":
        return "row_serial" if device.is_cpu_adapter else "tree"
    return strategy


def need_f32(op: str, name: str, buf: Buffer, count: int) -> None:
    """Raises ShapeError unless ``buf`` holds at least ``count`` float32 values."""
    if count < 0:
        raise ShapeError(f"{op}: {name} count must be >= 0, got {count}")
    if buf.nbytes < 4 * count:
        raise ShapeError(
            f"{op}: {name} ({buf.label!r}) holds {buf.nbytes // 4} f32 values but the op needs "
            f"{count}; allocate it with at least {4 * count} bytes"
        )


def check_power_of_two(op: str, workgroup_size: int, minimum: int = 1) -> int:
    """Returns ``workgroup_size`` or raises ConfigError unless it is a power of two in
    [``minimum``, 256] (the launchers whose shaders reduce by halving the workgroup)."""
    if not minimum <= workgroup_size <= 256 or workgroup_size & (workgroup_size - 1):
        raise ConfigError(
            f"{op}: workgroup_size must be a power of two in [{minimum}, 256] (the tree "
            f"reduction halves it), got {workgroup_size}; hint: use 64, 128 or 256"
        )
    return workgroup_size
