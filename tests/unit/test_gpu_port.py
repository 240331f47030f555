"""The host-agnostic parts of the GPU port: shader loading, params packing, grids."""

from __future__ import annotations

import struct

import pytest

from evermind.errors import ConfigError, ShapeError
from evermind.gpu import grid_1d, load_shader, pack_params, shader_names


def test_shaders_are_found_and_loaded() -> None:
    assert "elementwise" in shader_names()
    assert "@compute" in load_shader("elementwise")


@pytest.mark.parametrize("name", ["../etc/passwd", "elementwise.wgsl", "Elementwise", "", "a/b"])
def test_shader_names_must_be_plain_identifiers(name: str) -> None:
    with pytest.raises(ConfigError, match="not a plain identifier"):
        load_shader(name)


def test_missing_shader_lists_what_exists() -> None:
    with pytest.raises(ConfigError, match=r"no shader named 'nope'.*available: .*elementwise"):
        load_shader("nope")


def test_pack_params_layout_and_padding() -> None:
    data = pack_params(("u32", 7), ("f32", 0.5), ("i32", -3))
    assert len(data) == 16
    assert struct.unpack("<Ifi", data[:12]) == (7, 0.5, -3)
    assert len(pack_params()) == 16
    assert len(pack_params(*[("u32", 1)] * 5)) == 32


def test_pack_params_rejects_bad_types_and_values() -> None:
    with pytest.raises(ConfigError, match="unknown field type 'f64'"):
        pack_params(("f64", 1.0))
    with pytest.raises(ConfigError, match="cannot pack"):
        pack_params(("u32", -1))


@pytest.mark.parametrize(
    ("n", "wg", "grid"),
    [
        (0, 256, (1, 1, 1)),
        (1, 256, (1, 1, 1)),
        (257, 256, (2, 1, 1)),
        (65535 * 256, 256, (65535, 1, 1)),
        (65535 * 256 + 1, 256, (65535, 2, 1)),
    ],
)
def test_grid_1d(n: int, wg: int, grid: tuple[int, int, int]) -> None:
    assert grid_1d(n, wg) == grid


def test_grid_1d_rejects_negative() -> None:
    with pytest.raises(ShapeError):
        grid_1d(-1, 256)
