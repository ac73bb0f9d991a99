#!/usr/bin/env python3
"""Time to first token with the prompt cache on vs off, on a shared-prefix workload and on a no-hit workload.

It starts two servers (cache on: planner default; cache off: --prompt-cache-gib 0), or uses --on-url
and --off-url, and sends 2 x --requests streaming requests to each, interleaved in ABBA order (on, off, off, on, ...).
  shared prefix: a --prefix-tokens system prefix + a --suffix-tokens distinct suffix; every tenth
                 request uses a fresh prefix instead (90% hits once the shared prefix is cached;
                 one untimed request per server warms it).
  no hit:        every prompt distinct (--nohit-tokens tokens).
Prints the median TTFT per side, the ratio off/on and the observed hit rate. Goals: >= 5x lower
TTFT with the cache on the shared-prefix workload, ~1x (no slowdown beyond noise) on no-hit.
Exits non-zero on failed requests, or with --check when a goal is missed (--min-ratio,
--max-slowdown).

    python3 bench/bench_prefix_ttft.py --threads 2 --prefix-tokens 2000 --requests 10
"""
import argparse
import os
import statistics
import sys
import time

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.join(REPO, "bench"))
sys.path.insert(0, os.path.join(REPO, "tests", "python"))
from bench_restore import complete, prompt_ids  # noqa: E402
from server_util import DEFAULT_BIN, server  # noqa: E402


class Workload:
    """Prompt generator for one workload; each side gets the same sequence of prompts."""

    def __init__(self, kind, prefix_tokens, suffix_tokens, nohit_tokens):
        self.kind, self.prefix_tokens, self.suffix_tokens, self.nohit_tokens = kind, prefix_tokens, suffix_tokens, nohit_tokens
        self.shared = prompt_ids(424242, prefix_tokens)

    def prompt(self, i):
        """The i-th prompt (i counts every request sent to one side); i % 10 == 9 is a fresh prefix."""
        if self.kind == "nohit":
            return prompt_ids(800000 + i, self.nohit_tokens)
        prefix = prompt_ids(600000 + i, self.prefix_tokens) if i % 10 == 9 else self.shared
        return prefix + prompt_ids(700000 + i, self.suffix_tokens)


def run_one(url, wl, i, max_tokens, s):
    try:
        r = complete(url, wl.prompt(i), max_tokens, {"temperature": 0.0}, stream=True)
        s["ttft"].append(r["ttft"])
        s["hits"].append(bool(r["cached"]))
    except Exception as e:  # noqa: BLE001  (counted)
        s["errors"].append(str(e))


def run_workload(urls, wl, requests_per_block, max_tokens, out=print):
    """ABBA blocks on {"on": url, "off": url}; returns a summary dict."""
    res = {side: {"ttft": [], "hits": [], "errors": [], "next": 0} for side in urls}
    if wl.kind == "shared":
        for side, url in urls.items():  # untimed: puts the shared prefix in the cache
            complete(url, wl.shared + prompt_ids(1, wl.suffix_tokens), max_tokens, {"temperature": 0.0})
    t0 = time.monotonic()
    # request-level ABBA (on off off on ...) so drift in machine load falls on both sides alike
    for j in range(4 * requests_per_block):
        side = ("on", "off", "off", "on")[j % 4]
        s = res[side]
        run_one(urls[side], wl, s["next"], max_tokens, s)
        s["next"] += 1
    summary = {"kind": wl.kind, "seconds": time.monotonic() - t0}
    for side, s in res.items():
        summary[side] = {"median_ttft": statistics.median(s["ttft"]) if s["ttft"] else float("nan"),
                         "hit_rate": sum(s["hits"]) / max(1, len(s["hits"])), "n": len(s["ttft"]),
                         "errors": s["errors"]}
    summary["ratio"] = summary["off"]["median_ttft"] / summary["on"]["median_ttft"]
    on, off = summary["on"], summary["off"]
    out(f"{wl.kind:>7}: cache on median TTFT {on['median_ttft'] * 1000:.0f} ms (hit rate {on['hit_rate']:.0%}, "
        f"n {on['n']}), cache off {off['median_ttft'] * 1000:.0f} ms (hit rate {off['hit_rate']:.0%}, n {off['n']}), "
        f"off/on {summary['ratio']:.2f}x, errors {len(on['errors']) + len(off['errors'])}, {summary['seconds']:.0f} s")
    for e in (on["errors"] + off["errors"])[:5]:
        out(f"  error: {e}")
    return summary


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--prefix-tokens", type=int, default=2000)
    ap.add_argument("--suffix-tokens", type=int, default=32)
    ap.add_argument("--nohit-tokens", type=int, default=1000)
    ap.add_argument("--requests", type=int, default=10, help="half the requests per side")
    ap.add_argument("--max-tokens", type=int, default=4)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--chunk", type=int, default=None, help="--chunk for started servers (default: the server's)")
    ap.add_argument("--workloads", default="shared,nohit")
    ap.add_argument("--check", action="store_true", help="exit non-zero when a goal is missed")
    ap.add_argument("--min-ratio", type=float, default=5.0)
    ap.add_argument("--max-slowdown", type=float, default=1.15, help="no-hit: allowed on/off TTFT ratio")
    ap.add_argument("--bin", default=None, help=f"tensorfold binary (default {DEFAULT_BIN})")
    ap.add_argument("--on-url", default=None)
    ap.add_argument("--off-url", default=None)
    a = ap.parse_args()
    base = ["--threads", a.threads, "--parallel", 1]
    if a.chunk:
        base += ["--chunk", a.chunk]
    kinds = [k.strip() for k in a.workloads.split(",") if k.strip()]

    def body(urls):
        bad = 0
        for kind in kinds:
            s = run_workload(urls, Workload(kind, a.prefix_tokens, a.suffix_tokens, a.nohit_tokens), a.requests, a.max_tokens)
            bad += len(s["on"]["errors"]) + len(s["off"]["errors"])
            if a.check and kind == "shared" and s["ratio"] < a.min_ratio:
                print(f"  goal missed: shared-prefix ratio {s['ratio']:.2f} < {a.min_ratio}")
                bad += 1
            if a.check and kind == "nohit" and 1 / s["ratio"] > a.max_slowdown:
                print(f"  goal missed: no-hit slowdown {1 / s['ratio']:.2f} > {a.max_slowdown}")
                bad += 1
        return bad

    if a.on_url and a.off_url:
        bad = body({"on": a.on_url.rstrip("/"), "off": a.off_url.rstrip("/")})
    else:
        with server(base, bin_path=a.bin) as on, server(base + ["--prompt-cache-gib", 0], bin_path=a.bin) as off:
            bad = body({"on": on.url, "off": off.url})
    print("OK" if bad == 0 else f"FAIL: {bad} problems")
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
