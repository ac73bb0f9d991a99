"""scripts/make_random_model.py: the folders it writes carry a tokenizer that TensorFold loads, of
the shape's whole vocabulary, so a random model can be served and sent text."""
import json
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO / "scripts"))
sys.path.insert(0, str(REPO / "bench"))
import make_random_model  # noqa: E402
from synthetic_vocab import write_tokenizer  # noqa: E402


def tensorfold(binary, *args, stdin=None):
    return subprocess.run([binary, *map(str, args)], input=stdin, capture_output=True, text=True, timeout=60)


def test_a_small_llama_runs_from_text(tmp_path, monkeypatch, tensorfold_bin):
    # Llama-3.2-1B's vocabulary and token ids with tiny layers: the real embedding rows take too
    # long to draw on a CPU for a unit test.
    tiny = dict(make_random_model.SHAPES["llama3.2-1b"], hidden_size=64, intermediate_size=128,
                num_attention_heads=4, num_key_value_heads=2, head_dim=16)
    monkeypatch.setitem(make_random_model.SHAPES, "tiny-llama", tiny)
    out = tmp_path / "m"
    monkeypatch.setattr(sys, "argv", ["make_random_model.py", "--shape", "tiny-llama", "--layers", "1", "--out", str(out)])
    make_random_model.main()
    assert json.loads((out / "tokenizer_config.json").read_text())["eos_token"] == "[128001]"
    r = tensorfold(tensorfold_bin, "tokenize", "--model", out, "--text", "Hello world")
    assert r.returncode == 0, r.stderr
    assert r.stdout.split() == [",".join(str(b) for b in b"Hello world")]
    r = tensorfold(tensorfold_bin, "run", "--model", out, "--prompt", "Hello world", "--max-tokens", 2,
                   "--temperature", 0, "--ids", "--device", "cpu", "--threads", 2)
    assert r.returncode == 0, r.stderr
    ids = [int(x) for x in r.stdout.strip().split(",")]
    assert 1 <= len(ids) <= 2 and all(0 <= i < 128256 for i in ids), ids
    assert "embedding" not in r.stderr, r.stderr


@pytest.mark.parametrize("shape", sorted(make_random_model.SHAPES))
def test_every_shape_gets_its_whole_vocabulary(tmp_path, tensorfold_bin, shape):
    cfg = make_random_model.SHAPES[shape]
    (tmp_path / "config.json").write_text(json.dumps(cfg))
    write_tokenizer(str(tmp_path))
    V = cfg["vocab_size"]
    lines = [json.dumps("tabs\tand   spaces"), json.dumps([V - 1]), json.dumps([V])]
    r = tensorfold(tensorfold_bin, "tokenize", "--model", tmp_path, "--jsonl", stdin="\n".join(lines) + "\n")
    assert r.returncode == 0, r.stderr
    got = [json.loads(line) for line in r.stdout.splitlines()]
    assert got == [list(b"tabs\tand") + [128] + list(b" spaces"), f"[{V - 1}]", ""], got
    tc = json.loads((tmp_path / "tokenizer_config.json").read_text())
    assert tc["add_bos_token"] is False and {"bos_token", "eos_token"} <= tc.keys(), tc


def test_keeps_a_folders_own_tokenizer(tmp_path, monkeypatch, capsys):
    tiny = dict(make_random_model.SHAPES["llama3.2-1b"], hidden_size=8, intermediate_size=8, num_attention_heads=2,
                num_key_value_heads=1, head_dim=4, vocab_size=300)
    monkeypatch.setitem(make_random_model.SHAPES, "tiny", tiny)
    (tmp_path / "tokenizer.json").write_text("{\"mine\": true}")
    monkeypatch.setattr(sys, "argv", ["make_random_model.py", "--shape", "tiny", "--layers", "1", "--out", str(tmp_path)])
    make_random_model.main()
    assert json.loads((tmp_path / "tokenizer.json").read_text()) == {"mine": True}
    assert not (tmp_path / "tokenizer_config.json").exists()
    assert "its own tokenizer.json kept" in capsys.readouterr().out
