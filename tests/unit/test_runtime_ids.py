"""Response ids and default seeds of the request path (evermind.runtime.ids): the shape the
OpenAI and Anthropic wire formats use, distinct draws, and no os.urandom read per call (the
GIL hand-off that read cost on the event loop is why the module exists)."""

from __future__ import annotations

import os
import re

import pytest

from evermind.runtime import ids


def test_response_ids_have_the_uuid4_hex_shape_and_do_not_repeat() -> None:
    made = {ids.response_id("cmpl-") for _ in range(5000)}
    assert len(made) == 5000
    assert all(re.fullmatch(r"cmpl-[0-9a-f]{32}", value) for value in made)
    assert re.fullmatch(r"msg_[0-9a-f]{24}", ids.response_id("msg_", 24))


def test_fresh_seeds_are_64_bit_and_differ() -> None:
    seeds = [ids.fresh_seed() for _ in range(1000)]
    assert len(set(seeds)) == 1000 and all(0 <= s < 2**64 for s in seeds)


def test_no_system_call_per_id(monkeypatch: pytest.MonkeyPatch) -> None:
    def refuse(n: int) -> bytes:
        raise AssertionError("os.urandom called on the request path")

    monkeypatch.setattr(os, "urandom", refuse)
    ids.response_id("chatcmpl-")
    ids.fresh_seed()


@pytest.mark.skipif(not hasattr(os, "fork"), reason="needs os.fork")
def test_a_forked_child_does_not_repeat_its_parents_ids() -> None:
    read, write = os.pipe()
    pid = os.fork()
    if pid == 0:  # the child: its next id, then out without pytest's teardown
        os.write(write, ids.response_id("cmpl-").encode())
        os._exit(0)
    os.close(write)
    _, status = os.waitpid(pid, 0)
    child = os.read(read, 64).decode()
    os.close(read)
    assert status == 0 and child.startswith("cmpl-")
    assert child != ids.response_id("cmpl-")
