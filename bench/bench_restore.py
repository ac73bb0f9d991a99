#!/usr/bin/env python3
"""Resumed equals cold: a reply that adopts a cached prefix must equal, token for token, a reply computed from scratch.

It starts a cold server (--prompt-cache-gib 0) and a warm server (cache on), or uses --cold-url and
--warm-url. Prompts are token-id lists (exact lengths; ids drawn from the plain part of the vocabulary).

Default mode, at temperature 0 and at temperature 1.0 with per-request seeds, on the warm server:
  1. a long prompt (--prompt-tokens, default 3000), 2. the same prompt again, 3. --n at once,
  4. one long streaming request, and --n - 1 more sent while it decodes.
Every reply's token ids must equal the cold server's; every request after the first must report
usage.prompt_tokens_details.cached_tokens > 0; no request may fail.

--round-robin: --conversations multi-turn conversations (each turn appends the reply and a new
user part) visited in turn for --rounds rounds on a warm server whose cache holds about
--cache-convs of them (so it evicts), once without and once with a host tier (--host-cache-gib);
every reply must equal the cold server's, and /debug/census must be ok with pages_used 0 after
each round.

    python3 bench/bench_restore.py --prompt-tokens 3000 --n 4
    python3 bench/bench_restore.py --round-robin --conversations 5 --cache-convs 2 --rounds 3
"""
import argparse
import json
import os
import random
import sys
import threading
import time

import requests

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.join(REPO, "tests", "python"))
from server_util import DEFAULT_BIN, server  # noqa: E402

TOKEN_LO, TOKEN_HI = 300, 3900  # plain tokens of the default model's 4096-entry vocabulary
PAGE_BYTES_DEFAULT = 65536


def prompt_ids(seed, n):
    """A deterministic token-id prompt of exactly n tokens."""
    rng = random.Random(seed)
    return [rng.randrange(TOKEN_LO, TOKEN_HI) for _ in range(n)]


def complete(url, prompt, max_tokens, sampling, stream=False, salt=None, timeout=600, on_first=None):
    """One completion -> {"ids", "cached", "ttft", "total"}; raises on any failure.

    With stream, ttft is the time to the first token event and on_first() runs when it arrives.
    """
    body = {"prompt": prompt, "max_tokens": max_tokens, "return_token_ids": True, "ignore_eos": True}
    body.update(sampling)
    if salt is not None:
        body["cache_salt"] = salt
    t0 = time.monotonic()
    if not stream:
        r = requests.post(url + "/v1/completions", json=body, timeout=timeout)
        if r.status_code != 200:
            raise RuntimeError(f"HTTP {r.status_code}: {r.text[:300]}")
        j = r.json()
        ids = j["choices"][0].get("token_ids") or []
        cached = j["usage"].get("prompt_tokens_details", {}).get("cached_tokens")
        ttft = None
    else:
        body["stream"] = True
        body["stream_options"] = {"include_usage": True}
        ids, cached, ttft = [], None, None
        with requests.post(url + "/v1/completions", json=body, timeout=timeout, stream=True) as r:
            if r.status_code != 200:
                raise RuntimeError(f"HTTP {r.status_code}: {r.text[:300]}")
            for line in r.iter_lines():
                if not line.startswith(b"data:"):
                    continue
                data = line[5:].strip()
                if data == b"[DONE]":
                    break
                ev = json.loads(data)
                if "error" in ev:
                    raise RuntimeError(f"stream error: {ev['error']}")
                for ch in ev.get("choices", []):
                    got = ch.get("token_ids") or []
                    if got and ttft is None:
                        ttft = time.monotonic() - t0
                        if on_first:
                            on_first()
                    ids += got
                if ev.get("usage"):
                    cached = ev["usage"].get("prompt_tokens_details", {}).get("cached_tokens")
    if len(ids) != max_tokens:
        raise RuntimeError(f"bad reply: {len(ids)} ids for max_tokens {max_tokens}")
    return {"ids": ids, "cached": cached, "ttft": ttft, "total": time.monotonic() - t0}


def census(url):
    return requests.get(url + "/debug/census", timeout=30).json()


def wait_idle_census(url, timeout=10.0):
    """Polls /debug/census until no page is used and nothing is busy or queued; returns the last answer."""
    deadline = time.monotonic() + timeout
    while True:
        c = census(url)
        if c["pages_used"] == 0 and c["lanes_busy"] == 0 and c["queued"] == 0:
            return c
        if time.monotonic() > deadline:
            return c
        time.sleep(0.05)


def first_diff(a, b):
    return next((i for i, (x, y) in enumerate(zip(a, b)) if x != y), min(len(a), len(b)))


class Checker:
    """Compares warm replies with the cold server's reply to the same request (cold replies are memoised)."""

    def __init__(self, cold_url):
        self.cold_url = cold_url
        self.ref = {}
        self.lock = threading.Lock()
        self.checked = self.unequal = self.failed = self.no_hit = 0
        self.details = []

    def reference(self, prompt, max_tokens, sampling):
        key = (tuple(prompt), max_tokens, json.dumps(sampling, sort_keys=True))
        if key not in self.ref:
            self.ref[key] = complete(self.cold_url, prompt, max_tokens, sampling)["ids"]
        return self.ref[key]

    def check(self, label, prompt, max_tokens, sampling, got, want_hit):
        """got: a complete() result or an Exception."""
        with self.lock:
            self.checked += 1
            if isinstance(got, Exception):
                self.failed += 1
                self.details.append(f"{label}: failed: {got}")
                return
            if want_hit and not got["cached"]:
                self.no_hit += 1
                self.details.append(f"{label}: cached_tokens {got['cached']} on a resume")
        want = self.reference(prompt, max_tokens, sampling)
        if got["ids"] != want:
            with self.lock:
                self.unequal += 1
                self.details.append(f"{label}: differs from cold at token {first_diff(got['ids'], want)} "
                                    f"(cached_tokens {got['cached']})")

    def bad(self):
        return self.unequal + self.failed + self.no_hit


def in_threads(fns):
    """Runs the callables at once (behind a barrier); returns their results or exceptions in order."""
    out = [None] * len(fns)
    barrier = threading.Barrier(len(fns))

    def work(i):
        barrier.wait()
        try:
            out[i] = fns[i]()
        except Exception as e:  # noqa: BLE001  (every failure is counted)
            out[i] = e

    ts = [threading.Thread(target=work, args=(i,)) for i in range(len(fns))]
    for t in ts:
        t.start()
    for t in ts:
        t.join()
    return out


def run_restore(warm, chk, prompt_tokens=3000, n=4, max_tokens=16, long_tokens=64, out=print):
    """The four phases at two temperatures; returns per-phase timing lines."""
    modes = [("t0", lambda s: {"temperature": 0.0}),
             ("t1", lambda s: {"temperature": 1.0, "top_p": 0.95, "seed": s})]
    for mi, (mname, samp) in enumerate(modes):
        prompt = prompt_ids(1000 + mi, prompt_tokens)
        t0 = time.monotonic()
        first = complete(warm, prompt, max_tokens, samp(1))
        t1 = time.monotonic()
        again = complete(warm, prompt, max_tokens, samp(1))
        t2 = time.monotonic()
        res = in_threads([lambda s=s: complete(warm, prompt, max_tokens, samp(s)) for s in range(2, 2 + n)])
        t3 = time.monotonic()
        chk.check(f"{mname} first", prompt, max_tokens, samp(1), first, want_hit=False)
        chk.check(f"{mname} again", prompt, max_tokens, samp(1), again, want_hit=True)
        for s, r in zip(range(2, 2 + n), res):
            chk.check(f"{mname} at-once seed {s}", prompt, max_tokens, samp(s), r, want_hit=True)
        t3b = time.monotonic()
        started = threading.Event()
        long_res = {}

        def long_stream():
            try:
                long_res["r"] = complete(warm, prompt, long_tokens, samp(50), stream=True, on_first=started.set)
            except Exception as e:  # noqa: BLE001
                long_res["r"] = e
                started.set()

        lt = threading.Thread(target=long_stream)
        lt.start()
        started.wait(timeout=600)
        res = in_threads([lambda s=s: complete(warm, prompt, max_tokens, samp(s)) for s in range(60, 60 + n - 1)])
        lt.join()
        t4 = time.monotonic()
        chk.check(f"{mname} long stream", prompt, long_tokens, samp(50), long_res["r"], want_hit=True)
        for s, r in zip(range(60, 60 + n - 1), res):
            chk.check(f"{mname} beside-stream seed {s}", prompt, max_tokens, samp(s), r, want_hit=True)
        out(f"{mname}: first {t1 - t0:.2f} s (cached {first['cached']}), again {t2 - t1:.2f} s "
            f"(cached {again['cached']}), {n} at once {t3 - t2:.2f} s, 1 stream + {n - 1} beside it {t4 - t3b:.2f} s")


def run_round_robin(warm, chk, conversations=5, rounds=3, first_tokens=1000, user_tokens=48, max_tokens=16, out=print):
    """Multi-turn round robin; returns the number of census failures."""
    convs = [prompt_ids(5000 + c, first_tokens) for c in range(conversations)]
    bad_census = 0
    for rnd in range(rounds):
        hits = 0
        for c in range(conversations):
            samp = {"temperature": 0.0} if c % 2 == 0 else {"temperature": 1.0, "top_p": 0.95, "seed": 7 * c + rnd}
            try:
                r = complete(warm, convs[c], max_tokens, samp)
            except Exception as e:  # noqa: BLE001
                r = e
            chk.check(f"round {rnd} conv {c}", convs[c], max_tokens, samp, r, want_hit=False)
            if isinstance(r, Exception):
                continue
            hits += 1 if r["cached"] else 0
            convs[c] = convs[c] + r["ids"] + prompt_ids(9000 + 100 * c + rnd, user_tokens)
        cz = wait_idle_census(warm)
        mem = requests.get(warm + "/memory", timeout=30).json()
        pc = mem["prompt_cache"]
        ok = cz["ok"] and cz["pages_used"] == 0
        bad_census += 0 if ok else 1
        out(f"  round {rnd}: {hits}/{conversations} hits, census ok={cz['ok']} used={cz['pages_used']} "
            f"kept={cz['pages_kept']}, evictions {pc['evictions']}, host evictions {pc['host_evictions']}, "
            f"restores {pc['restores']}")
        if not ok:
            chk.details.append(f"round {rnd}: census {cz}")
    return bad_census


def cache_gib(convs, tokens, page_bytes=PAGE_BYTES_DEFAULT, page=16):
    """GiB for about `convs` conversations of `tokens` tokens of kept pages."""
    return convs * (tokens // page + 1) * page_bytes / 2**30


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--prompt-tokens", type=int, default=3000)
    ap.add_argument("--n", type=int, default=4, help="requests at once (and --parallel of started servers)")
    ap.add_argument("--max-tokens", type=int, default=16)
    ap.add_argument("--long-tokens", type=int, default=64, help="length of the long streaming request")
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--chunk", type=int, default=256)
    ap.add_argument("--round-robin", action="store_true")
    ap.add_argument("--conversations", type=int, default=5)
    ap.add_argument("--cache-convs", type=float, default=2, help="round robin: cache size in conversations")
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--first-tokens", type=int, default=1000, help="round robin: first prompt length")
    ap.add_argument("--bin", default=None, help=f"tensorfold binary (default {DEFAULT_BIN})")
    ap.add_argument("--cold-url", default=None, help="a running server with --prompt-cache-gib 0")
    ap.add_argument("--warm-url", default=None, help="a running server with the cache on")
    a = ap.parse_args()
    base = ["--threads", a.threads, "--chunk", a.chunk, "--parallel", max(a.n, 1)]
    cold_args = base + ["--prompt-cache-gib", 0]

    def with_servers(cold_url, warm_args, fn):
        if a.warm_url and warm_args is None:
            return fn(cold_url, a.warm_url.rstrip("/"))
        with server(warm_args, bin_path=a.bin) as w:
            return fn(cold_url, w.url)

    def body(cold_url):
        chk = Checker(cold_url)
        bad_census = 0
        if not a.round_robin:
            with_servers(cold_url, None if a.warm_url else base, lambda c, w: run_restore(
                w, chk, a.prompt_tokens, a.n, a.max_tokens, a.long_tokens))
        else:
            # the conversation grows by (reply + user part) per round; size the cache for the last round
            last = a.first_tokens + a.rounds * (a.max_tokens + 48)
            gib = cache_gib(a.cache_convs, last)
            variants = [("device only", ["--prompt-cache-gib", f"{gib:.6f}"]),
                        ("with host tier", ["--prompt-cache-gib", f"{gib:.6f}", "--host-cache-gib", f"{4 * gib:.6f}"])]
            if a.warm_url:
                variants = [("given server", None)]
            for name, extra in variants:
                print(f"round robin, {name}: {a.conversations} conversations, cache {gib * 1024:.1f} MiB "
                      f"(~{a.cache_convs} conversations), {a.rounds} rounds")
                bad_census += with_servers(cold_url, None if extra is None else base + extra, lambda c, w: run_round_robin(
                    w, chk, a.conversations, a.rounds, a.first_tokens, 48, a.max_tokens))
        print(f"checked {chk.checked}: unequal {chk.unequal}, failed {chk.failed}, resumes without a hit {chk.no_hit}, "
              f"census failures {bad_census}")
        for d in chk.details[:20]:
            print(f"  {d}")
        return chk.bad() + bad_census

    if a.cold_url:
        bad = body(a.cold_url.rstrip("/"))
    else:
        with server(cold_args, bin_path=a.bin) as cold:
            bad = body(cold.url)
    print("OK: every reply equals cold" if bad == 0 else f"FAIL: {bad} problems")
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
