"""Response ids and default sampling seeds for the request path, made without a system call.

``uuid.uuid4()`` and an unseeded ``random.Random()`` each read ``os.urandom``, and CPython lets
go of the GIL around that read: on the event loop, with the scheduler thread holding the GIL
for its step, taking it back cost ~0.4 ms a request (``posix.urandom`` was the event loop's
largest entry under 32 clients). Here one private ``random.Random``, seeded once from
``os.urandom`` when this module is imported, draws them instead. The ids are opaque and unique
in practice (128 random bits) but not secret: nothing may rely on them being unguessable.
"""

from __future__ import annotations

import os
import random

__all__ = ["fresh_seed", "response_id"]

_SOURCE = random.Random()  # seeded from os.urandom, once
# A forked child reseeds (as the random module's own generator does), so a server forked into
# workers does not hand out its parent's next ids.
os.register_at_fork(after_in_child=_SOURCE.seed)


def response_id(prefix: str, hex_chars: int = 32) -> str:
    """``prefix`` and ``hex_chars`` random hex digits (``uuid4().hex``'s length by default).

    Args:
        prefix: E.g. ``"cmpl-"``.
        hex_chars: Digits after the prefix (1 to 32).
    """
    return f"{prefix}{_SOURCE.getrandbits(128):032x}"[: len(prefix) + hex_chars]


def fresh_seed() -> int:
    """A 64-bit seed for a request that gave none (its own ``random.Random`` is made from it)."""
    return _SOURCE.getrandbits(64)
