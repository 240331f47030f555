"""The Data panel's input checks (evermind.studio.inputs): binary refused, CSV problems by line."""

from __future__ import annotations

import base64
import json
import random

import pytest

from evermind.errors import ConfigError
from evermind.studio.inputs import check_csv, check_text_bytes


def test_random_bytes_are_refused_as_binary_with_the_reason() -> None:
    data = random.Random(0).randbytes(36_000)
    with pytest.raises(ConfigError, match=r"noise\.txt: refused as binary: it contains NUL"):
        check_text_bytes("noise.txt", data)
    no_nul = bytes(b or 1 for b in data)
    with pytest.raises(ConfigError, match=r"refused as binary: \d+% of its 36,000 bytes"):
        check_text_bytes("noise.txt", no_nul)


def test_control_characters_are_refused_and_text_passes() -> None:
    with pytest.raises(ConfigError, match="control characters"):
        check_text_bytes("ctl.txt", ("ab\x01\x02\x03" * 100).encode())
    text = "Plain text, with tabs\tand\r\nnewlines, and ünïcode ✓.\n"
    assert check_text_bytes("ok.txt", ("\ufeff" + text).encode()) == text
    with pytest.raises(ConfigError, match="empty"):
        check_text_bytes("none.txt", b"")
    # One stray byte in a long text is not binary, but still not UTF-8: said with its place.
    with pytest.raises(ConfigError, match=r"not UTF-8 text \(an invalid byte at 1,000\)"):
        check_text_bytes("one.txt", b"a" * 1000 + b"\xff" + b"b" * 1000)


def test_csv_problems_name_the_line() -> None:
    assert check_csv("ok.csv", 'id,body\n1,"a, b"\n2,"multi\nline"\n') == {
        "columns": ["id", "body"],
        "rows": 2,
    }
    with pytest.raises(ConfigError, match=r"starts on line 3 is never closed"):
        check_csv("open.csv", 'id,body\n1,fine\n2,"never closed\n3,more\n')
    with pytest.raises(
        ConfigError, match=r"line 3 has 3 fields, the header 2; line 4 has 1 fields"
    ):
        check_csv("ragged.csv", "id,body\n1,ok\n2,too,many\n3\n")
    with pytest.raises(ConfigError, match=r"bad\.csv:2: CSV problem on line 2"):
        check_csv("bad.csv", 'id,body\n1,"x"y\n')


def test_corpus_add_refuses_binary_files_and_malformed_csv() -> None:
    import asyncio

    from evermind.studio import api

    def call(fn: str, **kwargs: object) -> dict:
        return json.loads(asyncio.run(api.call(fn, json.dumps(kwargs))))

    noise = base64.b64encode(random.Random(1).randbytes(4096)).decode()
    envelope = call("corpus_add", name="noise.txt", data_b64=noise)
    assert envelope["error"]["type"] == "ConfigError"
    assert "refused as binary" in envelope["error"]["message"]
    bad = base64.b64encode(b'a,b\n1,"open\n').decode()
    envelope = call("corpus_check", name="t.csv", data_b64=bad)
    assert "never closed" in envelope["error"]["message"]
    good = base64.b64encode(b"a,b\n1,two words\n").decode()
    assert call("corpus_check", name="t.csv", data_b64=good)["result"]["columns"] == ["a", "b"]
