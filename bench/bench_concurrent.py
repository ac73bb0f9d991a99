#!/usr/bin/env python3
"""Exactness under concurrency: the token ids of a request must not depend on what runs beside it.

For each level L of --levels it starts `tensorfold serve --parallel L` (or talks to --url), sends
--prompts distinct prompts one at a time (solo), then all of them at once from threads
(concurrent), each at temperature 0 and at temperature 1.0 with a per-prompt seed, asking for
return_token_ids. Every concurrent reply must equal its solo reply, and with --bin every level
must equal the first level (so --parallel 1 against N). Prints per level "unequal: K, failed: F"
and exits non-zero if any reply is unequal or failed.

    python3 bench/bench_concurrent.py --levels 1,2,4,8 --prompts 8 --max-tokens 32
    python3 bench/bench_concurrent.py --url http://127.0.0.1:8080 --prompts 16
"""
import argparse
import os
import sys
import threading
import time

import requests

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.join(REPO, "tests", "python"))
from server_util import DEFAULT_BIN, server  # noqa: E402

WORDS = ("alpha bravo charlie delta echo foxtrot golf hotel india juliet kilo lima mike november oscar papa "
         "quebec romeo sierra tango uniform victor whiskey xray yankee zulu").split()


def make_prompts(n):
    """Distinct prompts of varied length; every fourth is long enough to take several prefill chunks."""
    out = []
    for i in range(n):
        k = 3 + (i * 7) % 23
        words = [WORDS[(i * 5 + j * 3) % len(WORDS)] for j in range(k)]
        if i % 4 == 3:
            words = words * (1 + 300 // len(words))
        out.append(f"Prompt {i}: " + " ".join(words))
    return out


def modes(n_prompts):
    """(name, sampling fields) for each prompt index: greedy, and seeded sampling."""
    return [("t0", lambda i: {"temperature": 0.0}),
            ("t1", lambda i: {"temperature": 1.0, "top_p": 0.95, "seed": 1000 + i})]


def request_ids(url, prompt, max_tokens, sampling, timeout=300):
    """Token ids of one completion; raises on any failure."""
    body = {"prompt": prompt, "max_tokens": max_tokens, "return_token_ids": True, "ignore_eos": True}
    body.update(sampling)
    r = requests.post(url + "/v1/completions", json=body, timeout=timeout)
    if r.status_code != 200:
        raise RuntimeError(f"HTTP {r.status_code}: {r.text[:200]}")
    ch = r.json()["choices"][0]
    ids = ch.get("token_ids")
    if ids is None or len(ids) != max_tokens:
        raise RuntimeError(f"bad reply: {len(ids or [])} ids, finish {ch.get('finish_reason')}")
    return ids


def run_jobs(url, jobs, max_tokens, concurrent):
    """jobs: {key: (prompt, sampling)} -> ({key: ids}, {key: error})."""
    ids, errors = {}, {}

    def one(key):
        prompt, sampling = jobs[key]
        try:
            ids[key] = request_ids(url, prompt, max_tokens, sampling)
        except Exception as e:  # noqa: BLE001  (every failure is counted, none stops the run)
            errors[key] = str(e)

    if concurrent:
        barrier = threading.Barrier(len(jobs))

        def worker(key):
            barrier.wait()
            one(key)

        threads = [threading.Thread(target=worker, args=(k,)) for k in jobs]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
    else:
        for k in jobs:
            one(k)
    return ids, errors


def check_level(url, prompts, max_tokens, reference=None):
    """Solo then concurrent at one server; returns a result dict with unequal/failed counts and the solo ids."""
    jobs = {}
    for name, fields in modes(len(prompts)):
        for i, p in enumerate(prompts):
            jobs[(name, i)] = (p, fields(i))
    t0 = time.monotonic()
    solo, solo_err = run_jobs(url, jobs, max_tokens, concurrent=False)
    t1 = time.monotonic()
    conc, conc_err = run_jobs(url, jobs, max_tokens, concurrent=True)
    t2 = time.monotonic()
    unequal, details = 0, []
    for key in jobs:
        if key in solo and key in conc and solo[key] != conc[key]:
            unequal += 1
            first = next(j for j, (a, b) in enumerate(zip(solo[key], conc[key])) if a != b)
            details.append(f"{key}: concurrent differs from solo at token {first}")
        if reference is not None and key in solo and key in reference and solo[key] != reference[key]:
            unequal += 1
            details.append(f"{key}: differs from the first level")
    failed = len(solo_err) + len(conc_err)
    details += [f"{k} solo: {e}" for k, e in solo_err.items()] + [f"{k} concurrent: {e}" for k, e in conc_err.items()]
    return {"unequal": unequal, "failed": failed, "details": details, "solo": solo,
            "solo_s": t1 - t0, "concurrent_s": t2 - t1, "requests": len(jobs)}


def run(levels, n_prompts=8, max_tokens=32, bin_path=None, url=None, threads=2, out=print, server_args=()):
    """Runs every level; returns {level: result}. With url, levels only label runs against that server.
    server_args go to every server this starts."""
    prompts = make_prompts(n_prompts)
    results, reference = {}, None
    for level in levels:
        if url:
            res = check_level(url, prompts, max_tokens, reference)
        else:
            with server(["--parallel", level, "--threads", threads, *server_args], bin_path=bin_path) as srv:
                res = check_level(srv.url, prompts, max_tokens, reference)
                idle = srv.wait_idle()
                if not idle["census_ok"]:
                    res["failed"] += 1
                    res["details"].append(f"KV census broken after the run: {idle['kv_pool']}")
        if reference is None:
            reference = res["solo"]
        results[level] = res
        out(f"level {level}: {res['requests']} requests x {max_tokens} tokens, solo {res['solo_s']:.2f} s, "
            f"concurrent {res['concurrent_s']:.2f} s, unequal: {res['unequal']}, failed: {res['failed']}")
        for d in res["details"][:10]:
            out(f"  {d}")
    return results


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--levels", default="1,2,4,8", help="comma-separated --parallel values")
    ap.add_argument("--prompts", type=int, default=8)
    ap.add_argument("--max-tokens", type=int, default=32)
    ap.add_argument("--threads", type=int, default=2, help="--threads for servers this script starts")
    ap.add_argument("--matmul-input", default="f32", choices=["f32", "bf16"],
                    help="--matmul-input for servers this script starts")
    g = ap.add_mutually_exclusive_group()
    g.add_argument("--bin", default=None, help=f"tensorfold binary (default {DEFAULT_BIN})")
    g.add_argument("--url", default=None, help="use this running server instead of starting one")
    a = ap.parse_args()
    levels = [int(x) for x in a.levels.split(",") if x.strip()]
    url = a.url.rstrip("/") if a.url else None
    results = run(levels, a.prompts, a.max_tokens, a.bin, url, a.threads,
                  server_args=("--matmul-input", a.matmul_input))
    bad = sum(r["unequal"] + r["failed"] for r in results.values())
    print("OK: all replies equal" if bad == 0 else f"FAIL: {bad} unequal or failed replies")
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
