"""The sentencepiece-style tokenizer read from GGUF metadata must give sentencepiece's own ids.

Comparison: tensorfold runs with --no-parse-special (sentencepiece never parses "<s>" written in
the text), and its output must equal [BOS=1] + SentencePieceProcessor.encode(text), since the
GGUF file asks for add_bos_token; the empty string gives [1] on both sides."""
import json
import subprocess
from pathlib import Path

import pytest

spm = pytest.importorskip("sentencepiece")

SHARED = Path(__file__).resolve().parents[2].parent / "shared" / "models"
GGUF = SHARED / "llama-2-tiny-random.gguf"
SPM_MODEL = SHARED / "llama-2-tokenizer.model"


@pytest.fixture(scope="module")
def files():
    if not GGUF.is_file() or not SPM_MODEL.is_file():
        pytest.skip(f"shared models not found under {SHARED} (llama-2-tiny-random.gguf, llama-2-tokenizer.model)")
    return GGUF, SPM_MODEL


def run_jsonl(binary, model, values, extra=()):
    inp = "".join(json.dumps(v) + "\n" for v in values)
    r = subprocess.run([binary, "tokenize", "--model", str(model), "--jsonl", *extra], input=inp.encode(),
                       capture_output=True, timeout=120)
    assert r.returncode == 0, r.stderr.decode(errors="replace")
    out = [json.loads(line) for line in r.stdout.decode().split("\n")[:-1]]
    assert len(out) == len(values)
    return out


def test_ids_match_sentencepiece(files, tensorfold_bin, hard_strings):
    gguf, model = files
    sp = spm.SentencePieceProcessor(model_file=str(model))
    ours = run_jsonl(tensorfold_bin, gguf, hard_strings, ["--no-parse-special"])
    want = [[1] + sp.encode(s) for s in hard_strings]
    bad = [(s, o, w) for s, o, w in zip(hard_strings, ours, want) if o != w]
    for s, o, w in bad:
        print(f"MISMATCH {s[:80]!r}\n  ours={o[:40]}\n  spm ={w[:40]}")
    assert not bad, f"{len(bad)} of {len(hard_strings)} strings differ from sentencepiece"


def test_decode_matches_sentencepiece(files, tensorfold_bin, hard_strings):
    gguf, model = files
    sp = spm.SentencePieceProcessor(model_file=str(model))
    ids = [sp.encode(s) for s in hard_strings]
    ours = run_jsonl(tensorfold_bin, gguf, ids)
    want = [sp.decode(i) for i in ids]
    bad = [(s, o, w) for s, o, w in zip(hard_strings, ours, want) if o != w]
    for s, o, w in bad:
        print(f"DECODE MISMATCH {s[:60]!r}\n  ours={o[:80]!r}\n  spm ={w[:80]!r}")
    assert not bad, f"{len(bad)} decodes differ from sentencepiece"


def test_control_tokens_parse_as_special(files, tensorfold_bin):
    gguf, _ = files
    ours = run_jsonl(tensorfold_bin, gguf, ["<s>Hi</s>"], ["--no-special"])[0]
    assert ours[0] == 1 and ours[-1] == 2 and len(ours) >= 3
