#!/usr/bin/env python3
"""Serving speed over the OpenAI API, and a digest of every reply so two builds can be compared.

For each level L of --levels (the server's --parallel, and L client threads) all prompts are sent
as streaming greedy completions with return_token_ids. Per level it reports output tokens/s
(all tokens over the level's wall time), time to first token and inter-token latency (p50/p90,
from the client's receive times of the SSE chunks). Per prompt it records sha256 of the reply's
token ids (greedy, ignore_eos): equal digests across levels mean concurrency changed nothing, and
equal digests across builds (compare two --json-out files) mean the same outputs.

    python3 bench/bench_openai.py --levels 1,2,4 --max-tokens 64 --json-out /tmp/a.json
    python3 bench/bench_openai.py --url http://127.0.0.1:8080 --levels 4 --prompts-file prompts.txt
"""
import argparse
import concurrent.futures as cf
import datetime
import hashlib
import json
import os
import statistics
import sys
import time

import requests

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.join(REPO, "tests", "python"))
from server_util import DEFAULT_BIN, server  # noqa: E402

DEFAULT_PROMPTS = [
    "The capital of France is",
    "Write a short poem about the sea.",
    "def fibonacci(n):",
    "Once upon a time, in a land far away,",
    "List three uses of a paperclip:",
    "Translate to German: The weather is nice today.",
    "In 1969, the first humans",
    "The quick brown fox jumps over the lazy dog. " * 8,
]


def digest(ids):
    return hashlib.sha256(json.dumps(ids, separators=(",", ":")).encode()).hexdigest()


def stream_one(url, prompt, max_tokens, api_key=None):
    """One streaming greedy completion: token ids, time to first token and the gaps between tokens."""
    body = {"prompt": prompt, "max_tokens": max_tokens, "temperature": 0, "stream": True,
            "return_token_ids": True, "ignore_eos": True, "stream_options": {"include_usage": True}}
    headers = {"Authorization": f"Bearer {api_key}"} if api_key else {}
    t0 = time.perf_counter()
    ids, times, usage = [], [], None
    with requests.post(url + "/v1/completions", json=body, headers=headers, stream=True, timeout=600) as r:
        if r.status_code != 200:
            raise RuntimeError(f"HTTP {r.status_code}: {r.text[:200]}")
        for line in r.iter_lines():
            if not line.startswith(b"data:"):
                continue
            data = line[5:].strip()
            if data == b"[DONE]":
                break
            ev = json.loads(data)
            if "error" in ev:
                raise RuntimeError(f"stream error: {ev['error']}")
            if ev.get("usage"):
                usage = ev["usage"]
            for ch in ev.get("choices", []):
                got = ch.get("token_ids") or []
                if got:
                    now = time.perf_counter()
                    ids.extend(got)
                    times.extend([now] * len(got))
    end = time.perf_counter()
    if usage is not None and usage["completion_tokens"] != len(ids):
        raise RuntimeError(f"usage says {usage['completion_tokens']} tokens, stream carried {len(ids)}")
    ttft = times[0] - t0 if times else None
    itl = [b - a for a, b in zip(times, times[1:])]
    return {"ids": ids, "ttft": ttft, "itl": itl, "latency": end - t0}


def pct(xs, q):
    if not xs:
        return float("nan")
    xs = sorted(xs)
    return xs[min(len(xs) - 1, int(q * (len(xs) - 1) + 0.5))]


def run_level(url, level, prompts, max_tokens, api_key=None):
    t0 = time.perf_counter()
    with cf.ThreadPoolExecutor(max_workers=level) as ex:
        futs = [ex.submit(stream_one, url, p, max_tokens, api_key) for p in prompts]
        results, errors = [], []
        for f in futs:
            try:
                results.append(f.result())
            except Exception as e:  # noqa: BLE001  (counted and reported)
                results.append(None)
                errors.append(str(e))
    wall = time.perf_counter() - t0
    ok = [r for r in results if r]
    tokens = sum(len(r["ids"]) for r in ok)
    ttfts = [r["ttft"] for r in ok if r["ttft"] is not None]
    itls = [x for r in ok for x in r["itl"]]
    return {
        "level": level, "requests": len(prompts), "errors": errors, "tokens": tokens, "wall_s": wall,
        "tokens_per_s": tokens / wall if wall > 0 else 0.0,
        "ttft_p50_ms": 1e3 * pct(ttfts, 0.5), "ttft_p90_ms": 1e3 * pct(ttfts, 0.9),
        "itl_p50_ms": 1e3 * pct(itls, 0.5), "itl_p90_ms": 1e3 * pct(itls, 0.9),
        "itl_mean_ms": 1e3 * statistics.fmean(itls) if itls else float("nan"),
        "digests": [digest(r["ids"]) if r else None for r in results],
    }


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--levels", default="1,2,4")
    ap.add_argument("--max-tokens", type=int, default=64)
    ap.add_argument("--prompts-file", help="one prompt per line (default: a built-in list)")
    ap.add_argument("--repeat", type=int, default=1, help="send the prompt list this many times per level")
    ap.add_argument("--threads", type=int, default=None, help="--threads for servers this script starts")
    ap.add_argument("--model", help="--model for servers this script starts (default: the built-in model)")
    ap.add_argument("--api-key")
    ap.add_argument("--json-out")
    g = ap.add_mutually_exclusive_group()
    g.add_argument("--bin", default=None, help=f"tensorfold binary (default {DEFAULT_BIN})")
    g.add_argument("--url", help="use this running server instead of starting one per level")
    a = ap.parse_args()
    levels = [int(x) for x in a.levels.split(",") if x.strip()]
    if a.prompts_file:
        with open(a.prompts_file, encoding="utf-8") as f:
            prompts = [ln.rstrip("\n") for ln in f if ln.strip()]
    else:
        prompts = list(DEFAULT_PROMPTS)
    prompts = prompts * a.repeat

    rows = []
    for level in levels:
        if a.url:
            rows.append(run_level(a.url.rstrip("/"), level, prompts, a.max_tokens, a.api_key))
            continue
        args = ["--parallel", level]
        if a.threads:
            args += ["--threads", a.threads]
        if a.model:
            args += ["--model", a.model]
        if a.api_key:
            args += ["--api-key", a.api_key]
        with server(args, bin_path=a.bin) as srv:
            run_level(srv.url, level, prompts[:1], 4, a.api_key)  # warm-up
            rows.append(run_level(srv.url, level, prompts, a.max_tokens, a.api_key))

    print(f"{'level':>5} {'reqs':>5} {'err':>4} {'tokens':>7} {'wall s':>7} {'tok/s':>8} "
          f"{'ttft p50':>9} {'ttft p90':>9} {'itl p50':>8} {'itl p90':>8}  (ms)")
    for r in rows:
        print(f"{r['level']:>5} {r['requests']:>5} {len(r['errors']):>4} {r['tokens']:>7} {r['wall_s']:>7.2f} "
              f"{r['tokens_per_s']:>8.1f} {r['ttft_p50_ms']:>9.1f} {r['ttft_p90_ms']:>9.1f} "
              f"{r['itl_p50_ms']:>8.2f} {r['itl_p90_ms']:>8.2f}")
    same = all(r["digests"] == rows[0]["digests"] for r in rows)
    print("reply digests equal across levels: " + ("yes" if same else "NO"))
    for i, d in enumerate(rows[0]["digests"] if rows else []):
        print(f"  prompt {i}: {d[:16] if d else 'failed'}")
    for r in rows:
        for e in r["errors"][:5]:
            print(f"  level {r['level']} error: {e}")
    if a.json_out:
        with open(a.json_out, "w", encoding="utf-8") as f:
            json.dump({"date": datetime.datetime.now().isoformat(timespec="seconds"), "max_tokens": a.max_tokens,
                       "prompts": prompts, "url": a.url, "levels": rows, "digests_equal_across_levels": same},
                      f, indent=1)
    errors = sum(len(r["errors"]) for r in rows)
    return 1 if errors or not same else 0


if __name__ == "__main__":
    sys.exit(main())
