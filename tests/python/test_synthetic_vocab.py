"""bench/synthetic_vocab.py: the tokenizer.json that random-weight models are served with must load
in HF `tokenizers` and in `tensorfold tokenize` alike, give one ASCII piece per id, and never
replace a folder's own tokenizer.json. Also bench/bench_servers.py's argument checks for a run of
one server, the engine rounds it reads from TensorFold's /metrics, and its spaced arrivals."""
import json
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO / "bench"))
import synthetic_vocab  # noqa: E402


def make_folder(tmp_path, vocab):
    d = tmp_path / f"v{vocab}"
    d.mkdir()
    (d / "config.json").write_text(json.dumps({"model_type": "llama", "vocab_size": vocab}))
    return d


def run_cli(*args):
    return subprocess.run([sys.executable, *map(str, args)], capture_output=True, text=True, timeout=60)


def test_ids_match_hf_and_tensorfold(tmp_path, tensorfold_bin):
    tokenizers = pytest.importorskip("tokenizers")
    d = make_folder(tmp_path, 300)
    r = run_cli(REPO / "bench" / "synthetic_vocab.py", d)
    assert r.returncode == 0, r.stderr
    hf = tokenizers.Tokenizer.from_file(str(d / "tokenizer.json"))
    assert hf.get_vocab_size() == 300
    for i in range(300):
        piece = hf.decode([i])
        assert piece and piece.isascii(), (i, piece)
    texts = ["hello world", "runs   of    spaces", "tabs\tand\nnewlines", "[5] is text, not an id", "~!@#$%^&*()"]
    want = [hf.encode(t).ids for t in texts]
    assert any(128 in ids for ids in want), "the one merge (two spaces, inside a run of three or more) never applied"
    inp = "".join(json.dumps(t) + "\n" for t in texts)
    r = subprocess.run([tensorfold_bin, "tokenize", "--model", str(d), "--jsonl"], input=inp,
                       capture_output=True, text=True, timeout=60)
    assert r.returncode == 0, r.stderr
    assert [json.loads(line) for line in r.stdout.splitlines()] == want


def test_keeps_an_existing_tokenizer(tmp_path):
    d = make_folder(tmp_path, 300)
    (d / "tokenizer.json").write_text("{\"mine\": true}")
    assert synthetic_vocab.write_tokenizer(str(d)) == str(d / "tokenizer.json")
    assert json.loads((d / "tokenizer.json").read_text()) == {"mine": True}


def test_rejects_a_vocabulary_too_small_or_missing(tmp_path):
    r = run_cli(REPO / "bench" / "synthetic_vocab.py", make_folder(tmp_path, 129))
    assert r.returncode != 0 and "below 130" in r.stderr
    d = tmp_path / "none"
    d.mkdir()
    (d / "config.json").write_text("{}")
    r = run_cli(REPO / "bench" / "synthetic_vocab.py", d)
    assert r.returncode != 0 and "vocab_size" in r.stderr
    assert not (d / "tokenizer.json").exists()


@pytest.mark.parametrize("args,message", [
    (["--order", "vllm", "--tf-url", "http://127.0.0.1:9", "--vocab", "300"], "unknown server 'vllm'"),
    (["--order", "tensorfold"], "--tf-url or --tf-model"),
    (["--order", "llama.cpp", "--vocab", "300"], "--llama-url or --llama-gguf"),
    (["--tf-url", "http://127.0.0.1:9", "--vocab", "300", "--arrival-ms", "-1"], "--arrival-ms must be 0 or more"),
])
def test_bench_servers_checks_what_the_order_needs(args, message):
    r = run_cli(REPO / "bench" / "bench_servers.py", *args)
    assert r.returncode == 2 and message in r.stderr, r.stderr


def test_bench_servers_reads_the_engine_rounds(tensorfold_bin):
    # A small run against the built-in model on the CPU: the TensorFold row carries the mean
    # decode-only round and its forward from the server's /metrics, and the emit per token.
    r = run_cli(REPO / "bench" / "bench_servers.py", "--tf-bin", tensorfold_bin, "--tf-model",
                REPO / "models" / "default", "--device", "cpu", "--tf-args=--threads 2", "--order", "tensorfold",
                "-n", 4, "-p", 16, "-g", 8, "--rounds", 1, "--check-prompts", 0, "--client-procs", 1)
    assert r.returncode == 0, r.stderr[-2000:]
    row = next(json.loads(line) for line in r.stdout.splitlines() if '"server"' in line)
    assert row["errors"] == 0 and row["generated"] == 4 * 8, row
    assert row["decode_rounds"] > 0, row
    assert row["decode_round_ms"] >= row["decode_forward_ms"] > 0, row
    assert row["emit_us_per_token"] > 0, row


def test_bench_servers_spaces_arrivals(tensorfold_bin):
    # --arrival-ms 150: the fourth request leaves 450 ms after the first, so the round lasts longer.
    r = run_cli(REPO / "bench" / "bench_servers.py", "--tf-bin", tensorfold_bin, "--tf-model",
                REPO / "models" / "default", "--device", "cpu", "--tf-args=--threads 2", "--order", "tensorfold",
                "-n", 4, "-p", 16, "-g", 8, "--rounds", 1, "--check-prompts", 0, "--client-procs", 2,
                "--arrival-ms", 150)
    assert r.returncode == 0, r.stderr[-2000:]
    row = next(json.loads(line) for line in r.stdout.splitlines() if '"server"' in line)
    assert row["errors"] == 0 and row["generated"] == 4 * 8 and row["arrival_ms"] == 150, row
    assert row["wall_s"] >= 0.45, row
