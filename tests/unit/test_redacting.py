"""``StreamScrubber``: a key split anywhere across deltas never comes out, and the text that
does is exactly the whole text scrubbed."""

from __future__ import annotations

import random

from evermind.bridges.answers import scrub
from evermind.bridges.redacting import StreamScrubber, scrub_value

KEYS = ("sk-abcdef0123456789", "abcabcabd", "zz")


def test_every_split_of_a_text_with_keys_gives_the_scrubbed_text() -> None:
    rng = random.Random(35)
    pieces = ["plain ", KEYS[0], " then ", KEYS[1][:4], " abc ", KEYS[1], KEYS[2], " sk-abc", "!"]
    text = "".join(pieces)
    for _ in range(300):
        cuts = sorted(rng.sample(range(1, len(text)), rng.randint(1, 12)))
        parts = [text[a:b] for a, b in zip([0, *cuts], [*cuts, len(text)], strict=True)]
        scrubber = StreamScrubber(KEYS)
        released = []
        for part in parts:
            out = scrubber.feed(part)
            released.append(out)
            for key in KEYS:  # nothing released so far holds a whole key
                assert key not in "".join(released)
        released.append(scrubber.flush())
        assert "".join(released) == scrub(text, KEYS), parts


def test_scrub_value_reaches_every_string() -> None:
    value = {"a": [KEYS[0], {"b": f"x{KEYS[1]}y"}], KEYS[2]: 5}
    assert scrub_value(value, KEYS) == {"a": ["***", {"b": "x***y"}], "***": 5}
