#!/usr/bin/env python3
"""Long prompts tokenized at once: seconds per /tokenize request, and how long a GET sent while they
run waits for its reply.

Starts `tensorfold serve` on the built-in model (or uses --url), posts --requests prompts of --mb
megabytes of random letters and digits (mostly distinct words, so the word cache misses) from
threads at once, then, --get-after seconds later, times GET /v1/models. Prints one line per
request and the GET's wait; run it against two binaries to compare them side by side.

    python3 bench/bench_tokenize_concurrent.py --requests 2 --mb 6
    python3 bench/bench_tokenize_concurrent.py --bin /tmp/old/tensorfold --requests 2 --mb 6
"""
import argparse
import os
import random
import string
import sys
import threading
import time

import requests

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.join(REPO, "tests", "python"))
from server_util import DEFAULT_BIN, server  # noqa: E402


def random_texts(n, mb, seed=3):
    """n texts of mb megabytes of random letters and digits."""
    rng = random.Random(seed)
    alphabet = string.ascii_letters + string.digits
    return ["".join(rng.choice(alphabet) for _ in range(int(mb * 1e6))) for _ in range(n)]


def measure(url, texts, get_after):
    """Posts every text to /tokenize from threads at once and, get_after seconds later, times a GET;
    returns ([(seconds, status, token count)] per text, the GET's seconds); a GET that fails raises."""
    spans = [None] * len(texts)

    def post(i):
        t0 = time.monotonic()
        r = requests.post(url + "/tokenize", json={"prompt": texts[i]}, timeout=600)
        spans[i] = (time.monotonic() - t0, r.status_code, r.json().get("count", 0) if r.ok else 0)

    threads = [threading.Thread(target=post, args=(i,)) for i in range(len(texts))]
    for t in threads:
        t.start()
    time.sleep(get_after)
    t0 = time.monotonic()
    requests.get(url + "/v1/models", timeout=600).raise_for_status()
    get_s = time.monotonic() - t0
    for t in threads:
        t.join()
    return spans, get_s


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--requests", type=int, default=2)
    ap.add_argument("--mb", type=float, default=6.0, help="megabytes of text a request")
    ap.add_argument("--get-after", type=float, default=0.5, help="seconds after the posts start")
    ap.add_argument("--threads", type=int, default=2, help="--threads for the server this starts")
    g = ap.add_mutually_exclusive_group()
    g.add_argument("--bin", default=None, help=f"tensorfold binary (default {DEFAULT_BIN})")
    g.add_argument("--url", default=None, help="use this running server instead of starting one")
    a = ap.parse_args()
    texts = random_texts(a.requests, a.mb)
    if a.url:
        spans, get_s = measure(a.url.rstrip("/"), texts, a.get_after)
    else:
        with server(["--parallel", 1, "--threads", a.threads], bin_path=a.bin) as srv:
            spans, get_s = measure(srv.url, texts, a.get_after)
    for i, (s, code, count) in enumerate(spans):
        print(f"request {i}: {s:.2f} s, status {code}, {count} tokens")
    print(f"GET /v1/models during them: {get_s * 1e3:.1f} ms")
    return 0 if all(code == 200 for _, code, _ in spans) else 1


if __name__ == "__main__":
    sys.exit(main())
