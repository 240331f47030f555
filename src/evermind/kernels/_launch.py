"""Small helpers shared by the kernel launchers (argument checks, f32 sizes)."""

from __future__ import annotations

from evermind.errors import ShapeError
from evermind.gpu import Buffer


def need_f32(op: str, name: str, buf: Buffer, count: int) -> None:
    """Raises ShapeError unless ``buf`` holds at least ``count`` float32 values."""
    if count < 0:
        raise ShapeError(f"{op}: {name} count must be >= 0, got {count}")
    if buf.nbytes < 4 * count:
        raise ShapeError(
            f"{op}: {name} ({buf.label!r}) holds {buf.nbytes // 4} f32 values but the op needs "
            f"{count}; allocate it with at least {4 * count} bytes"
        )
