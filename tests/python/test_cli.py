"""The CLI's run, perplexity and bench commands on the built-in default model, and its checks of option values."""
import json
import math
import os
import subprocess

import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def run(bin_path, *args, timeout=120):
    out = subprocess.run([bin_path, *args], capture_output=True, text=True, timeout=timeout)
    return out


def test_run_is_reproducible_with_a_seed(tensorfold_bin):
    args = ["run", "--prompt", "Fortune favors the", "--max-tokens", "12", "--seed", "5", "--ids", "--threads", "2"]
    a, b = run(tensorfold_bin, *args), run(tensorfold_bin, *args)
    assert a.returncode == 0, a.stderr
    ids = [int(x) for x in a.stdout.strip().split(",")]
    assert len(ids) == 12 and a.stdout == b.stdout
    c = run(tensorfold_bin, *args[:-4], "--seed", "6", "--ids", "--threads", "2")
    assert c.stdout != a.stdout


def test_run_prompt_ids_are_used_exactly(tensorfold_bin):
    # Text and ids of the same prompt (with its BOS) give the same greedy continuation.
    tok = run(tensorfold_bin, "tokenize", "--model", os.path.join(ROOT, "models", "default"), "--text", "Hello")
    assert tok.returncode == 0, tok.stderr
    ids = tok.stdout.strip()
    a = run(tensorfold_bin, "run", "--prompt", "Hello", "--temperature", "0", "--max-tokens", "6", "--ids")
    b = run(tensorfold_bin, "run", "--prompt-ids", ids, "--temperature", "0", "--max-tokens", "6", "--ids")
    assert a.returncode == 0 and b.returncode == 0, a.stderr + b.stderr
    assert a.stdout == b.stdout


def test_run_rejects_bad_input(tensorfold_bin):
    assert run(tensorfold_bin, "run", "--prompt-ids", "1,x,3").returncode != 0
    r = run(tensorfold_bin, "run", "--prompt-ids", "1,99999999", "--ids")
    assert r.returncode != 0 and "vocabulary" in r.stderr
    r = run(tensorfold_bin, "run", "--model", "/nonexistent/model", "--prompt", "x")
    assert r.returncode != 0 and "/nonexistent/model" in r.stderr


def test_perplexity_reports_a_finite_value(tensorfold_bin, tmp_path):
    text = tmp_path / "t.txt"
    text.write_text("A penny saved is a penny earned. " * 20)
    r = run(tensorfold_bin, "perplexity", "--file", str(text), "--window", "64", "--json")
    assert r.returncode == 0, r.stderr
    j = json.loads(r.stdout)
    assert math.isfinite(j["perplexity"]) and j["perplexity"] > 1 and j["tokens"] > 100
    r2 = run(tensorfold_bin, "perplexity", "--file", str(text), "--window", "64", "--json", "--threads", "1")
    assert json.loads(r2.stdout)["perplexity"] == j["perplexity"]


def test_matmul_input_is_chosen_reported_and_checked(tensorfold_bin, tmp_path):
    # bf16 input changes the default model's numbers a little (its weights are BF16), not a lot.
    text = tmp_path / "t.txt"
    text.write_text("Fortune favors the bold, and the bold are seldom idle. " * 12)
    ppl = {}
    for mode in ("f32", "bf16"):
        r = run(tensorfold_bin, "perplexity", "--file", str(text), "--window", "64", "--json", "--matmul-input", mode)
        assert r.returncode == 0, r.stderr
        ppl[mode] = json.loads(r.stdout)["perplexity"]
    assert ppl["f32"] != ppl["bf16"] and abs(ppl["bf16"] / ppl["f32"] - 1) < 0.05, ppl
    r = run(tensorfold_bin, "bench", "--pp", "16", "--tg", "2", "--batch", "1", "--json", "--threads", "2",
            "--matmul-input", "bf16")
    assert r.returncode == 0, r.stderr
    assert json.loads(r.stdout.strip().splitlines()[-1])["matmul_input"] == "bf16"
    bad = run(tensorfold_bin, "run", "--prompt", "x", "--matmul-input", "fp16")
    assert bad.returncode != 0 and "--matmul-input" in bad.stderr


def test_text_inputs_past_the_tokenizer_limit_fail_fast(tensorfold_bin, tmp_path):
    # A sparse file of 1 GiB + 1 byte reads as zeros: refused by its size before any read.
    big = tmp_path / "big.txt"
    with open(big, "wb") as f:
        f.truncate((1 << 30) + 1)
    model = os.path.join(ROOT, "models", "default")
    for args in (["tokenize", "--model", model, "--file", str(big)], ["perplexity", "--file", str(big)]):
        r = run(tensorfold_bin, *args, timeout=60)
        assert r.returncode != 0 and "MiB one text may hold" in r.stderr, (args, r.stderr[-500:])
    # Through stdin the size is unknown: the read stops at the limit.
    with open(big, "rb") as f:
        r = subprocess.run([tensorfold_bin, "tokenize", "--model", model, "--text", "-"], stdin=f,
                           capture_output=True, text=True, timeout=120)
    assert r.returncode != 0 and "stdin" in r.stderr and "MiB one text may hold" in r.stderr, r.stderr[-500:]
    # A --jsonl line past the limit gets an error line; the lines around it are served.
    src = b'"ab"\n"' + b"a" * ((1 << 30) + 8) + b'"\n"ab"\n'
    r = subprocess.run([tensorfold_bin, "tokenize", "--model", model, "--jsonl"], input=src,
                       capture_output=True, timeout=120)
    lines = [json.loads(x) for x in r.stdout.decode().splitlines()]
    assert r.returncode == 0 and len(lines) == 3, r.stderr[-500:]
    assert lines[0] == lines[2] and isinstance(lines[0], list)
    assert "longer than" in lines[1]["error"]


def test_bench_prints_rates(tensorfold_bin):
    r = run(tensorfold_bin, "bench", "--pp", "32", "--tg", "8", "--batch", "1,2", "--json", "--threads", "2")
    assert r.returncode == 0, r.stderr
    rows = [json.loads(line) for line in r.stdout.strip().splitlines()]
    assert [x["batch"] for x in rows] == [1, 2]
    assert all(x["pp_tps"] > 0 and x["tg_tps"] > 0 for x in rows)


def test_bench_decodes_at_a_depth(tensorfold_bin):
    r = run(tensorfold_bin, "bench", "--pp", "8", "--tg", "4", "--depth", "40", "--batch", "2", "--json", "--threads", "2")
    assert r.returncode == 0, r.stderr
    row = json.loads(r.stdout.strip().splitlines()[-1])
    assert row["depth"] == 40 and row["tg_tps"] > 0
    bad = run(tensorfold_bin, "bench", "--depth", "-1")
    assert bad.returncode != 0 and "--depth" in bad.stderr
    # The text table says where decode starts: after the depth's prompt, or a 1-token one.
    for args, want in ((["--depth", "40"], "40"), ([], "1")):
        r = run(tensorfold_bin, "bench", "--pp", "8", "--tg", "4", "--batch", "2", "--threads", "2", *args)
        assert r.returncode == 0, r.stderr
        header, row = r.stdout.strip().splitlines()[-2:]
        assert header.split()[:4] == ["batch", "pp", "tg", "depth"], header
        assert row.split()[3] == want, row


@pytest.mark.parametrize("args", [
    ["serve", "--max-queue-mib", "nan"], ["serve", "--prompt-cache-gib", "nan"], ["serve", "--host-cache-gib", "inf"],
    ["serve", "--memory-fraction", "-nan"], ["run", "--prompt", "x", "--temperature", "nan"],
    ["run", "--prompt", "x", "--top-p", "inf"], ["run", "--prompt", "x", "--min-p", "nan"],
    ["run", "--prompt", "x", "--repetition-penalty", "nan"], ["bench", "--temperature", "nan"],
    ["bench", "--presence-penalty", "inf"], ["serve", "--max-queue-mib", "32abc"],
])
def test_float_options_refuse_what_is_not_a_finite_number(tensorfold_bin, args):
    # Every comparison with nan is false, so a range check alone lets it through.
    r = run(tensorfold_bin, *args)
    assert r.returncode != 0, r.stdout[-300:]
    assert args[-2] in r.stderr and ("not a finite number" in r.stderr or "not a number" in r.stderr), r.stderr[-300:]
