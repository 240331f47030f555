"""The one exception tree of Evermind.

Every error the package raises on purpose derives from :class:`EvermindError`, so a
caller can catch the whole family with one clause and a narrower branch when it cares::

    EvermindError
    ├── ConfigError            bad configuration or user-supplied options (also ValueError)
    ├── ShapeError             an array/tensor of the wrong shape or dtype (also ValueError)
    ├── GPUError               anything that went wrong talking to WebGPU
    │   ├── NoAdapterError     no WebGPU adapter on this host (with a hint how to get one)
    │   ├── ShaderCompileError WGSL failed to compile; carries file, line and column
    │   └── DeviceLostError    the device was lost (driver reset, out of memory)
    ├── TokenizerError         tokenizer training/loading/encoding failed
    ├── PackageError           a `.evermind` package is invalid, corrupt or unsafe
    ├── StorageError           the memory / cache storage backend failed
    └── BundleError            the offline web bundle could not be built or found

Messages say what was expected, what was received, and a hint.
"""

from __future__ import annotations

from collections.abc import Iterable


class EvermindError(Exception):
    """Base class of every error Evermind raises on purpose."""


class ConfigError(EvermindError, ValueError):
    """A configuration value or user option is invalid."""


class ShapeError(EvermindError, ValueError):
    """An input has the wrong shape, size or dtype for the operation."""


class GPUError(EvermindError):
    """WebGPU reported a failure (validation, out of memory, internal)."""


class NoAdapterError(GPUError):
    """No WebGPU adapter is available on this host."""


class DeviceLostError(GPUError):
    """The GPU device was lost; state on it is gone and must be rebuilt."""


class ShaderCompileError(GPUError):
    """A WGSL shader failed to compile.

    Attributes:
        shader: The shader file name (e.g. ``elementwise.wgsl``).
        line: 1-based line of the first error, or 0 when the compiler gave none.
        column: 1-based column of the first error, or 0 when unknown.
        detail: The compiler's own message.
    """

    def __init__(self, shader: str, line: int, column: int, detail: str) -> None:
        self.shader = shader
        self.line = line
        self.column = column
        self.detail = detail
        super().__init__(f"{shader}:{line}:{column}: WGSL compile error: {detail}")


class TokenizerError(EvermindError):
    """Tokenizer training, loading or encoding failed."""


class PackageError(EvermindError):
    """A `.evermind` package is invalid, corrupt, or unsafe to read."""


class StorageError(EvermindError):
    """The storage backend (SQLite, IndexedDB) failed or holds invalid data."""


class BundleError(EvermindError):
    """The offline web bundle (dist/web) could not be built or is incomplete."""


def check_ranges(owner: str, checks: Iterable[tuple[str, object, float, float]]) -> None:
    """Raises :class:`ConfigError` for the first ``(name, value, low, high)`` whose value is
    not a number in ``[low, high]``; ``owner`` (e.g. ``"RecallOptions"``) starts the message."""
    for name, value, low, high in checks:
        if not (isinstance(value, int | float) and low <= value <= high):
            raise ConfigError(f"{owner}: {name} must be in [{low}, {high}], got {value!r}")
