#!/usr/bin/env python3
"""Whether tensorfold binaries give the same bits on one model: each serves MODEL in turn (extra
serve arguments in TF_ARGS) and answers the same greedy requests with the logprob of every prompt
position (echo) and every drawn token, one at a time and then all at once. JSON floats print to
the last bit, so equal answers mean equal logits.
    python3 tests/gpu/same_bits.py MODEL BIN [BIN ...] [--requests 12] [--tokens 24]
Prints one JSON line: per binary, requests whose concurrent answer differs from its own lone one;
per binary after the first, requests whose answer differs from the first binary's.
"""
import argparse
import json
import os
import random
import socket
import subprocess
import sys
import tempfile
import time
import urllib.request
from concurrent.futures import ThreadPoolExecutor


def post(url, body, timeout=600):
    req = urllib.request.Request(url, data=json.dumps(body).encode(), headers={"Content-Type": "application/json"})
    with urllib.request.urlopen(req, timeout=timeout) as r:
        return json.loads(r.read())


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def answers(binary, model, extra, prompts, tokens):
    port = free_port()
    log = tempfile.NamedTemporaryFile(prefix="same-bits-", suffix=".log", delete=False)
    cmd = [binary, "serve", "--model", model, "--port", str(port)] + extra
    proc = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=log)
    url = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + 300
        while True:
            if proc.poll() is not None:
                raise RuntimeError(f"{' '.join(cmd)} exited {proc.returncode}: {open(log.name).read()[-2000:]}")
            try:
                if urllib.request.urlopen(url + "/health", timeout=2).status == 200:
                    break
            except OSError:
                pass
            if time.monotonic() > deadline:
                raise RuntimeError(f"{' '.join(cmd)} not ready in 300 s")
            time.sleep(0.2)

        def one(p):
            j = post(url + "/v1/completions", {"prompt": p, "max_tokens": tokens, "temperature": 0.0, "echo": True,
                                               "logprobs": 1})
            lp = j["choices"][0]["logprobs"]
            return {"tokens": lp["tokens"], "token_logprobs": lp["token_logprobs"]}

        alone = [one(p) for p in prompts]
        with ThreadPoolExecutor(len(prompts)) as ex:
            together = list(ex.map(one, prompts))
        return alone, together
    finally:
        proc.terminate()
        try:
            proc.wait(timeout=30)
        except subprocess.TimeoutExpired:
            proc.kill()
        os.unlink(log.name)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("model")
    ap.add_argument("bins", nargs="+")
    ap.add_argument("--requests", type=int, default=12)
    ap.add_argument("--tokens", type=int, default=24)
    a = ap.parse_args()
    with open(os.path.join(a.model, "config.json")) as f:
        vocab = json.load(f)["vocab_size"]
    rng = random.Random(7)
    # Lengths across split seams and chunk sizes, a 1-token prompt among them.
    lens = [1, 63, 64, 65, 300, 511, 512, 513, 1100, 2049, 700, 4097][: a.requests]
    lens += [rng.randrange(2, 3000) for _ in range(a.requests - len(lens))]
    prompts = [[rng.randrange(10, vocab) for _ in range(n)] for n in lens]
    extra = os.environ.get("TF_ARGS", "").split()
    runs = [answers(b, a.model, extra, prompts, a.tokens) for b in a.bins]
    out = {"prompt_lengths": lens, "tokens": a.tokens, "args": extra,
           "concurrent_vs_alone_unequal": [sum(x != y for x, y in zip(al, tg)) for al, tg in runs],
           "vs_first_unequal": [sum(x != y for x, y in zip(runs[0][0], r[0])) for r in runs[1:]]}
    print(json.dumps(out))
    return 0 if not any(out["concurrent_vs_alone_unequal"]) and not any(out["vs_first_unequal"]) else 1


if __name__ == "__main__":
    sys.exit(main())
