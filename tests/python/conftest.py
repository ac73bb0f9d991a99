"""Shared pytest fixtures: the tensorfold binary and a corpus of strings that are hard to tokenize."""
import os
import random
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]


@pytest.fixture(scope="session")
def tensorfold_bin():
    path = Path(os.environ.get("TF_BIN", REPO / "build" / "tensorfold"))
    if not path.is_file():
        pytest.skip(f"tensorfold binary not found at {path} (build it or set TF_BIN)")
    return str(path)


def _long_random(seed, n):
    rng = random.Random(seed)
    pool = (list("abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789")
            + list(" \t\n\r.,;:'\"!?()[]{}<>-_=+*/\\|@#$%^&~`")
            + list("éüñçßøåæœ日本語中文한국어مرحباשלוםΕλληνικάПривет")
            + ["😀", "👍🏽", "\u200d", "\u0301", "\u00a0", "\u3000", "<|endoftext|>", "<s>", "'S", "'ll"])
    return "".join(rng.choice(pool) for _ in range(n))


HARD_STRINGS = [
    "", " ", "  ", "   ", "a", "Hello world", "Hello  world", "   leading spaces", "trailing spaces   ",
    "\t\ttabs\tand\nnewlines\n\n", "CRLF line\r\nnext line\r\n", "\n", "\r\n\r\n  \n", " \n \n ",
    "It's I'M you'RE they've we'd she'll HE'S 'S 's", "don't DON'T won't", "''''",
    "1234567890123456789", "3.14159 and 2,718,281 and 1e-10 and 007", "١٢٣ ٤٥٦ ½ ² ①",
    "naïve café résumé", "e\u0301 versus \u00e9", "\u00c5 vs A\u030a vs \u212b", "ﬁ ligature ２ full-width Ｈｅｌｌｏ",
    "日本語のテキストです。中文文本，汉字。", "한국어 텍스트 입니다", "مرحبا بالعالم", "שלום עולם", "Ελληνικά κείμενο",
    "Привет, мир!", "emoji 😀 👍🏽 👨‍👩‍👧‍👦 🏳️‍🌈 ❤️", "🎉🎉🎉", "a👨‍👩‍👧b",
    "def f(x):\n    return x**2  # comment\n", "if (a && b) { return c->d[i]; }\n\t}\n",
    "<html><body class=\"x\">hi</body></html>", "SELECT * FROM t WHERE id = 42;",
    "special <|endoftext|> inside", "<s>Hello</s>", "<|begin_of_text|>x<|eot_id|>", "<|im_start|>user\nhi<|im_end|>",
    "mixed\u00a0nbsp\u2009thin\u3000ideographic", "\u0085next line char", "x \u0085y \u0085\u0085 z", "zero\u200bwidth\u200djoiner",
    "\u0130stanbul \u01c5 \u00df \u1e9e ΣΑΣ", "\x00\x01\x7f control", "a" * 300, "ab" * 200, " " * 50 + "x",
    "\n" * 20, "The quick brown fox jumps over the lazy dog. " * 5,
    _long_random(1, 3000), _long_random(2, 500),
]


@pytest.fixture(scope="session")
def hard_strings():
    return HARD_STRINGS
