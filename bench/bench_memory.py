#!/usr/bin/env python3
"""Memory footprint against the planner: RSS at ready, after one request, with all lanes full, with the cache full.

For each launch of --launches (PARALLEL or PARALLEL:CACHE_GIB; default 1,4,8 at the planner's default
cache and 4:0.05 with a small explicit cache that fills quickly) it starts `tensorfold serve
--context C --parallel P` and reads /memory:
  ready   at /health;
  first   after one full-window request (prompt = context - max_tokens);
  lanes   after P distinct full-window requests at once;
  cache   after distinct full-window prompts (P at a time) until kept pages stop growing, cache
          evictions start, or --max-fill prompts were sent;
  peak    process.peak_rss_bytes at the end.
Checks: peak < limit_bytes, and first - ready <= lanes.first_use_bytes * 1.02 + --noise-mib MiB
(the first request may touch a few allocator pages outside the planner's lane: HTTP buffers,
sampler state, the tokenizer's caches). "accounted" = plan.footprint_bytes + plan.lanes_bytes +
prompt_cache.bytes is printed next to each RSS for comparison. Exits non-zero on a failed check.

    python3 bench/bench_memory.py --context 2048 --launches 1,4,8,4:0.05 --json-out /tmp/mem.json
"""
import argparse
import json
import os
import sys
import time

import requests

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.join(REPO, "bench"))
sys.path.insert(0, os.path.join(REPO, "tests", "python"))
from bench_restore import complete, in_threads, prompt_ids  # noqa: E402
from server_util import DEFAULT_BIN, server  # noqa: E402

MIB = 2**20


def snapshot(srv):
    m = srv.wait_idle(timeout=30)
    return m


def accounted(m):
    return m["plan"]["footprint_bytes"] + m["plan"]["lanes_bytes"] + m["prompt_cache"]["bytes"]


def run_launch(parallel, cache_gib, context, threads, max_tokens, max_fill, noise_mib, bin_path, out):
    args = ["--parallel", parallel, "--context", context, "--threads", threads]
    if cache_gib is not None:
        args += ["--prompt-cache-gib", cache_gib]
    plen = context - max_tokens
    seed = [0]

    def fresh():
        seed[0] += 1
        return prompt_ids(70000 + 1000 * parallel + seed[0], plen)

    row = {"parallel": parallel, "cache_gib": cache_gib, "context": context, "errors": 0}
    with server(args, bin_path=bin_path) as srv:
        ready = snapshot(srv)
        complete(srv.url, fresh(), max_tokens, {"temperature": 0.0})
        first = snapshot(srv)
        res = in_threads([lambda p=fresh(): complete(srv.url, p, max_tokens, {"temperature": 0.0})
                          for _ in range(parallel)])
        row["errors"] += sum(isinstance(r, Exception) for r in res)
        lanes = snapshot(srv)
        sent, kept_before, filled = 0, -1, False
        cache = lanes
        while sent < max_fill:
            batch = min(parallel, max_fill - sent)
            res = in_threads([lambda p=fresh(): complete(srv.url, p, max_tokens, {"temperature": 0.0})
                              for _ in range(batch)])
            row["errors"] += sum(isinstance(r, Exception) for r in res)
            sent += batch
            cache = snapshot(srv)
            kept = cache["kv_pool"]["pages_kept"]
            if cache["prompt_cache"]["evictions"] > 0 or kept == kept_before:
                filled = True
                break
            kept_before = kept
        row.update({
            "limit": ready["limit_bytes"], "first_use": ready["lanes"]["first_use_bytes"],
            "plan_footprint": ready["plan"]["footprint_bytes"], "plan_lanes": ready["plan"]["lanes_bytes"],
            "plan_cache": ready["plan"]["cache_bytes"], "cache_pages": ready["plan"]["cache_pages"],
            "rss_ready": ready["process"]["rss_bytes"], "rss_first": first["process"]["rss_bytes"],
            "rss_lanes": lanes["process"]["rss_bytes"], "rss_cache": cache["process"]["rss_bytes"],
            "acc_first": accounted(first), "acc_lanes": accounted(lanes), "acc_cache": accounted(cache),
            "peak": cache["process"]["peak_rss_bytes"], "fill_prompts": sent, "cache_filled": filled,
            "kept_pages": cache["kv_pool"]["pages_kept"], "evictions": cache["prompt_cache"]["evictions"],
            "census_ok": cache["census_ok"],
        })
    row["first_delta"] = row["rss_first"] - row["rss_ready"]
    row["first_allow"] = int(row["first_use"] * 1.02 + noise_mib * MIB)
    row["ok_first"] = row["first_delta"] <= row["first_allow"]
    row["ok_peak"] = row["peak"] < row["limit"]
    row["ok"] = row["ok_first"] and row["ok_peak"] and row["errors"] == 0 and row["census_ok"]
    return row


def mib(x):
    return f"{x / MIB:.1f}"


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--launches", default="1,4,8,4:0.05", help="PARALLEL or PARALLEL:CACHE_GIB, comma-separated")
    ap.add_argument("--context", type=int, default=2048)
    ap.add_argument("--max-tokens", type=int, default=8)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--max-fill", type=int, default=12, help="at most this many prompts to fill the cache")
    ap.add_argument("--noise-mib", type=float, default=0.0, help="allowed RSS beyond first_use_bytes*1.02 (MiB)")
    ap.add_argument("--bin", default=None, help=f"tensorfold binary (default {DEFAULT_BIN})")
    ap.add_argument("--json-out", default=None)
    a = ap.parse_args()
    rows = []
    for spec in a.launches.split(","):
        p, _, g = spec.strip().partition(":")
        t0 = time.monotonic()
        row = run_launch(int(p), float(g) if g else None, a.context, a.threads, a.max_tokens, a.max_fill,
                         a.noise_mib, a.bin, print)
        row["seconds"] = time.monotonic() - t0
        rows.append(row)
    print(f"RSS in MiB (accounted = plan footprint + lanes + cache bytes in parentheses); context {a.context}; "
          f"first-request allowance = first_use_bytes*1.02 + {a.noise_mib} MiB")
    print(f"{'launch':>10} {'limit':>9} {'first_use':>9} {'ready':>7} {'first':>15} {'lanes full':>15} "
          f"{'cache full':>15} {'peak':>7} {'1st delta/allow':>16} {'kept':>6} {'evict':>5} ok")
    for r in rows:
        name = f"p{r['parallel']}" + (f":{r['cache_gib']}G" if r["cache_gib"] is not None else ":auto")
        print(f"{name:>10} {mib(r['limit']):>9} {mib(r['first_use']):>9} {mib(r['rss_ready']):>7} "
              f"{mib(r['rss_first']) + ' (' + mib(r['acc_first']) + ')':>15} "
              f"{mib(r['rss_lanes']) + ' (' + mib(r['acc_lanes']) + ')':>15} "
              f"{mib(r['rss_cache']) + ' (' + mib(r['acc_cache']) + ')':>15} {mib(r['peak']):>7} "
              f"{mib(r['first_delta']) + '/' + mib(r['first_allow']):>16} {r['kept_pages']:>6} {r['evictions']:>5} "
              f"{'yes' if r['ok'] else 'NO'}{'' if r['cache_filled'] else ' (cache not filled: ' + str(r['fill_prompts']) + ' prompts)'}")
    if a.json_out:
        with open(a.json_out, "w") as f:
            json.dump(rows, f, indent=1)
    bad = [r for r in rows if not r["ok"]]
    print("OK: peak under the limit, first request within the plan" if not bad else
          f"FAIL: {len(bad)} launches failed a check: " + json.dumps([{k: r[k] for k in ('parallel', 'ok_first', 'ok_peak', 'errors', 'census_ok')} for r in bad]))
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
