"""Resource limits for reading untrusted `.evermind` packages.

This module owns :class:`PackageLimits`, the numbers the reader checks *before* it reads,
decompresses or allocates anything: archive size, member count, total uncompressed size,
JSON member sizes, per-member compression ratio (zip bombs) and the safetensors header
size. The defaults are safe for packages from strangers and roomy for Evermind's models.
"""

from __future__ import annotations

from dataclasses import dataclass, fields

from evermind.errors import ConfigError

KIB = 1024
MIB = 1024 * KIB
GIB = 1024 * MIB


@dataclass(frozen=True)
class PackageLimits:
    """Upper bounds the reader enforces before allocating.

    Attributes:
        max_archive_bytes: Size of the `.evermind` file itself.
        max_total_bytes: Sum of the declared uncompressed sizes of all members.
        max_members: Number of entries in the ZIP central directory.
        max_manifest_bytes: Uncompressed size of ``manifest.json``.
        max_json_bytes: Uncompressed size of each other text member (``config.json``,
            ``generation_config.json``, ``tokenizer.json``, ``README.md``).
        max_compression_ratio: Largest uncompressed/compressed size ratio of a member.
        ratio_floor_bytes: Members at most this large skip the ratio check (tiny files
            compress oddly and cannot make a bomb).
        max_safetensors_header_bytes: Length of the JSON header of ``model.safetensors``.
    """

    max_archive_bytes: int = 2 * GIB
    max_total_bytes: int = 2 * GIB
    max_members: int = 32
    max_manifest_bytes: int = 1 * MIB
    max_json_bytes: int = 16 * MIB
    max_compression_ratio: float = 200.0
    ratio_floor_bytes: int = 64 * KIB
    max_safetensors_header_bytes: int = 16 * MIB

    def __post_init__(self) -> None:
        for field in fields(self):
            value = getattr(self, field.name)
            if isinstance(value, bool) or not isinstance(value, int | float) or value <= 0:
                raise ConfigError(
                    f"PackageLimits.{field.name} must be a positive number, found {value!r}"
                )
        if self.max_compression_ratio < 1:
            raise ConfigError(
                "PackageLimits.max_compression_ratio must be at least 1, found "
                f"{self.max_compression_ratio!r}"
            )
