"""Fixtures of the shader tests: ``events`` (see :mod:`tests.shaders.studio_rpc`)."""

from tests.shaders.studio_rpc import events

__all__ = ["events"]
