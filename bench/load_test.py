#!/usr/bin/env python3
"""A bounded load test on loopback: many concurrent clients, no errors, flat memory, a sound KV census.

Starts `tensorfold serve --parallel P` (or uses --url), warms it up, reads RSS from /memory, then
runs --clients threads that each send --requests completions (small max_tokens; alternately
streaming and not, completions and chat). Afterwards it waits for the server to go idle and checks
the KV census (pages_free + pages_kept + pages_used == pages_total, pages_used == 0 when idle, lanes idle) and
reports the RSS change. Exits non-zero on any error, a broken census, or RSS growth beyond
--max-rss-growth-mb.

    python3 bench/load_test.py --clients 64 --requests 4 --max-tokens 8
"""
import argparse
import json
import os
import sys
import threading
import time

import requests

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.join(REPO, "tests", "python"))
from server_util import DEFAULT_BIN, server  # noqa: E402

MB = 1024 * 1024


def one_request(url, client, i, max_tokens, session):
    """One request of the mix; returns the completion token count or raises."""
    stream = (client + i) % 2 == 1
    chat = (client + i) % 3 == 2
    seed = client * 1000 + i
    if chat:
        path = "/v1/chat/completions"
        body = {"messages": [{"role": "user", "content": f"Client {client} request {i}: say hello"}]}
    else:
        path = "/v1/completions"
        body = {"prompt": f"Client {client} request {i}: once upon a time"}
    body.update({"max_tokens": max_tokens, "temperature": 0.8, "seed": seed, "ignore_eos": True, "stream": stream})
    if stream:
        body["stream_options"] = {"include_usage": True}
        with session.post(url + path, json=body, stream=True, timeout=300) as r:
            if r.status_code != 200:
                raise RuntimeError(f"{path} stream: HTTP {r.status_code}: {r.text[:200]}")
            usage, done = None, False
            for line in r.iter_lines():
                if not line.startswith(b"data:"):
                    continue
                data = line[5:].strip()
                if data == b"[DONE]":
                    done = True
                    break
                ev = json.loads(data)
                if "error" in ev:
                    raise RuntimeError(f"{path} stream error: {ev['error']}")
                usage = ev.get("usage") or usage
            if not done or usage is None:
                raise RuntimeError(f"{path} stream ended without usage and [DONE]")
            n = usage["completion_tokens"]
    else:
        r = session.post(url + path, json=body, timeout=300)
        if r.status_code != 200:
            raise RuntimeError(f"{path}: HTTP {r.status_code}: {r.text[:200]}")
        n = r.json()["usage"]["completion_tokens"]
    if n != max_tokens:
        raise RuntimeError(f"{path}: {n} completion tokens, want {max_tokens}")
    return n


def memory(url):
    return requests.get(url + "/memory", timeout=30).json()


def wait_idle(url, timeout=10.0):
    deadline = time.monotonic() + timeout
    while True:
        m = memory(url)
        if m["kv_pool"]["pages_used"] == 0 and m["lanes"]["busy"] == 0:
            return m, True
        if time.monotonic() > deadline:
            return m, False
        time.sleep(0.05)


def run_load(url, clients=64, requests_each=4, max_tokens=8, warmup=16, out=print):
    """Runs the load against url; returns a summary dict (errors, rss, census)."""
    warm = requests.Session()
    for i in range(warmup):
        one_request(url, 10_000, i, max_tokens, warm)
    idle0, _ = wait_idle(url)
    rss0 = idle0["process"]["rss_bytes"]

    errors, tokens = [], [0]
    lock = threading.Lock()
    barrier = threading.Barrier(clients)

    def client(c):
        s = requests.Session()
        barrier.wait()
        for i in range(requests_each):
            try:
                n = one_request(url, c, i, max_tokens, s)
                with lock:
                    tokens[0] += n
            except Exception as e:  # noqa: BLE001  (every failure is counted)
                with lock:
                    errors.append(f"client {c} request {i}: {e}")
        s.close()

    t0 = time.monotonic()
    threads = [threading.Thread(target=client, args=(c,)) for c in range(clients)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    wall = time.monotonic() - t0
    idle1, went_idle = wait_idle(url)
    kv = idle1["kv_pool"]
    census = {
        "census_ok": bool(idle1["census_ok"]) and kv["pages_free"] + kv.get("pages_kept", 0) + kv["pages_used"] == kv["pages_total"],
        "idle": went_idle and kv["pages_used"] == 0 and idle1["lanes"]["busy"] == 0,
        "pages_total": kv["pages_total"], "pages_free": kv["pages_free"], "pages_used": kv["pages_used"],
        "pages_kept": kv.get("pages_kept", 0),
    }
    rss1 = idle1["process"]["rss_bytes"]
    summary = {
        "clients": clients, "requests": clients * requests_each, "errors": errors, "tokens": tokens[0],
        "wall_s": wall, "tokens_per_s": tokens[0] / wall if wall else 0.0,
        "rss_after_warmup_mb": rss0 / MB, "rss_end_mb": rss1 / MB, "rss_delta_mb": (rss1 - rss0) / MB,
        "peak_rss_mb": idle1["process"]["peak_rss_bytes"] / MB, **census,
    }
    out(f"{summary['requests']} requests from {clients} clients in {wall:.2f} s, {tokens[0]} tokens "
        f"({summary['tokens_per_s']:.0f} tok/s), errors: {len(errors)}")
    out(f"RSS after warm-up {summary['rss_after_warmup_mb']:.1f} MB, at the end {summary['rss_end_mb']:.1f} MB, "
        f"delta {summary['rss_delta_mb']:+.1f} MB, peak {summary['peak_rss_mb']:.1f} MB")
    out(f"KV census: total {kv['pages_total']}, free {kv['pages_free']}, kept {kv.get('pages_kept', 0)}, used {kv['pages_used']}, "
        f"census_ok {census['census_ok']}, idle {census['idle']}")
    for e in errors[:10]:
        out(f"  {e}")
    return summary


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--clients", type=int, default=64)
    ap.add_argument("--requests", type=int, default=4, help="requests per client")
    ap.add_argument("--max-tokens", type=int, default=8)
    ap.add_argument("--parallel", type=int, default=8)
    ap.add_argument("--threads", type=int, default=None)
    ap.add_argument("--max-rss-growth-mb", type=float, default=8.0)
    ap.add_argument("--json-out")
    g = ap.add_mutually_exclusive_group()
    g.add_argument("--bin", default=None, help=f"tensorfold binary (default {DEFAULT_BIN})")
    g.add_argument("--url", help="use this running server")
    a = ap.parse_args()
    if a.url:
        summary = run_load(a.url.rstrip("/"), a.clients, a.requests, a.max_tokens)
    else:
        args = ["--parallel", a.parallel] + (["--threads", a.threads] if a.threads else [])
        with server(args, bin_path=a.bin) as srv:
            summary = run_load(srv.url, a.clients, a.requests, a.max_tokens)
    if a.json_out:
        with open(a.json_out, "w", encoding="utf-8") as f:
            json.dump(summary, f, indent=1)
    bad = []
    if summary["errors"]:
        bad.append(f"{len(summary['errors'])} errors")
    if not summary["census_ok"] or not summary["idle"]:
        bad.append("KV census broken or server not idle")
    if summary["rss_delta_mb"] > a.max_rss_growth_mb:
        bad.append(f"RSS grew {summary['rss_delta_mb']:.1f} MB (limit {a.max_rss_growth_mb} MB)")
    print("OK" if not bad else "FAIL: " + "; ".join(bad))
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
