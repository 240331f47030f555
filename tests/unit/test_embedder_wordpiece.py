"""The pure-Python WordPiece tokenizer gives the ids of Hugging Face's BERT tokenizer.

The reference is the real ``tokenizers`` tokenizer of all-MiniLM-L6-v2 (``minilm_dir()``):
exact id equality on a few thousand texts of several kinds (prose from the standard
library's docstrings, Python source lines, numbers, punctuation, accented and non-Latin
scripts, emoji, control characters, random code points), and on every code point between
two letters, which also proves the shipped character table current.
"""

from __future__ import annotations

import inspect
import json
import random
from pathlib import Path

import pytest
import tokenizers  # with transformers in the test extra: a missing one fails, not skips

from evermind.embedder import unicode_table
from evermind.embedder.wordpiece import TABLE_NAME, WordPiece, normalize, pre_tokenize
from evermind.errors import TokenizerError
from evermind.train.teachers import minilm_dir

SCRIPTS = [
    "Ünïcödé façade naïve résumé coöperate Ångström",
    "Привет, мир! Как дела?",
    "Γειά σου Κόσμε — ελληνικά",
    "東京は日本の首都です。北京欢迎你！",
    "한국어 문장도 있습니다.",
    "नमस्ते दुनिया",
    "مرحبا بالعالم",
    "emoji 🎉🚀 with ZWJ 👩‍💻 and flags 🇫🇷",
    "tabs\tand\nnewlines\r\nand\x0bvertical\x0cfeed\x85next\u2028line",
    "null\x00byte and \ufffd replacement and \u200bzero width",
    "fullwidth ＡＢＣ１２３ and ﬁ ligature and ½ ¼",
    "$100.50 + 3.14e-10 = x^2; a<b>c | d~e `f` {g} [h] @i #j",
    "x" * 120 + " long word",
]


def _texts() -> list[str]:
    rng = random.Random(36)
    texts = list(SCRIPTS)
    source = Path(inspect.getfile(json.decoder)).read_text("utf-8") + Path(
        inspect.getfile(random)
    ).read_text("utf-8")
    texts += [line for line in source.splitlines() if line.strip()][:1200]
    docs = [inspect.getdoc(obj) or "" for obj in vars(random.Random).values()]
    docs += [inspect.getdoc(obj) or "" for obj in vars(str).values()]
    texts += [d for d in docs if d]
    for _ in range(600):
        a, b = rng.randint(0, 10**9), rng.random() * 1e6
        texts.append(f"{a} {b:.3f} {a:,} 0x{a:x} {b:e} v{a % 100}.{a % 7}.{a % 13}")
    blocks = [(0x20, 0x7E), (0xA0, 0x24F), (0x370, 0x52F), (0x590, 0x6FF), (0x900, 0x97F),
              (0x2000, 0x206F), (0x3000, 0x30FF), (0x4E00, 0x9FFF), (0xAC00, 0xD7A3),
              (0x1F300, 0x1F6FF), (0x0, 0x20), (0x300, 0x36F), (0xE000, 0xE0FF),
              (0xFF00, 0xFFEF), (0x2B800, 0x2BA00), (0x10000, 0x10FFFF)]  # fmt: skip
    for _ in range(1500):
        chars = []
        for _ in range(rng.randint(1, 60)):
            low, high = rng.choice(blocks)
            code = rng.randint(low, high)
            chars.append(chr(code) if not 0xD800 <= code < 0xE000 else "?")
            if rng.random() < 0.2:
                chars.append(" ")
        texts.append("".join(chars))
    return texts


@pytest.fixture(scope="module")
def reference() -> object:
    tokenizer = tokenizers.Tokenizer.from_file(str(minilm_dir() / "tokenizer.json"))
    tokenizer.no_padding()
    tokenizer.no_truncation()
    return tokenizer


@pytest.fixture(scope="module")
def wordpiece() -> WordPiece:
    return WordPiece.from_text((minilm_dir() / "vocab.txt").read_text("utf-8"))


def test_ids_equal_bert_tokenizer_on_varied_texts(reference, wordpiece) -> None:
    texts = _texts()
    assert len(texts) > 3000
    mismatches = []
    for text in texts:
        want = reference.encode(text, add_special_tokens=False).ids
        if wordpiece.encode(text) != want:
            mismatches.append((text[:60], want[:10], wordpiece.encode(text)[:10]))
    print(f"{len(mismatches)} of {len(texts)} texts differ; first: {mismatches[:3]}")
    assert not mismatches
    with_specials = reference.encode("Hello, World!").ids
    assert wordpiece.encode("Hello, World!", add_special_tokens=True) == with_specials


def test_shipped_character_table_is_what_tokenizers_does(reference) -> None:
    shipped = json.loads(
        (Path(unicode_table.__file__).parent / "data" / TABLE_NAME).read_text("utf-8")
    )
    assert unicode_table.probe(reference) == shipped


def test_steps_and_vocabulary_errors(wordpiece) -> None:
    assert normalize("Héllo\tWORLD\x00") == "hello world"
    assert pre_tokenize("don't stop!!") == ["don", "'", "t", "stop", "!", "!"]
    assert wordpiece.tokens(wordpiece.encode("unaffable")) == ["una", "##ffa", "##ble"]
    assert wordpiece.encode("x" * 101) == [wordpiece.unk_id]
    with pytest.raises(TokenizerError, match="lacks"):
        WordPiece(["a", "b"])
    with pytest.raises(TokenizerError, match="twice"):
        WordPiece(["[UNK]", "[CLS]", "[SEP]", "a", "a"])
    with pytest.raises(TokenizerError, match="takes a str"):
        wordpiece.encode(b"bytes")  # type: ignore[arg-type]
