#!/usr/bin/env python3
"""Side by side: `tensorfold serve` against llama.cpp's `llama-server`, same workload, one after the other.

Each server gets N concurrent streaming /v1/completions requests whose prompts are P fixed random
token ids (seeded; no tokenizer involved), max_tokens G, temperature 0 and ignore_eos, so every
request generates exactly G tokens. Before the timed round a warm-up round with other prompts
(so no prompt cache helps the timed round) runs at full concurrency. Then K prompts are asked
again without streaming to compare the greedy token ids of the two servers.

Printed on stdout, one JSON object a line: one per server (generated tok/s over the whole round,
TTFT and ITL p50/p99 from the client's receive times of the SSE chunks, errors), then one
"ratio" line (TensorFold / llama.cpp generated tok/s, the issue's goals, the greedy comparison).

Token counting: TensorFold's chunks carry token_ids (return_token_ids) and only those are counted;
llama.cpp's OpenAI chunks carry only text, one chunk per token once the text is complete UTF-8
(bench/hf_to_gguf_llama.py's vocabulary decodes every token to ASCII), so a chunk with text counts
as one token. Both are checked against the usage block of the last chunk and against -g; a
mismatch is an error of that request.

Servers are started here one at a time (--tf-model / --llama-gguf; each gets the whole card), or
given as URLs (--tf-url / --llama-url). Streams are spread over --client-procs processes so the
client's GIL does not limit the servers.

    python3 bench/bench_servers.py --tf-model /dev/shm/l8b --llama-gguf /dev/shm/l8b.gguf \
        --llama-bin /tmp/llama/build/bin/llama-server --device cuda -n 64 -p 512 -g 256
    python3 bench/bench_servers.py --tf-url http://127.0.0.1:8080 --llama-url http://127.0.0.1:8081 --vocab 128256
"""
import argparse
import concurrent.futures as cf
import contextlib
import http.client
import json
import multiprocessing as mp
import os
import shlex
import subprocess
import sys
import tempfile
import time
import urllib.parse

import numpy as np
import requests

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.join(REPO, "bench"))
sys.path.insert(0, os.path.join(REPO, "tests", "python"))
import server_util  # noqa: E402
from bench_openai import digest, pct  # noqa: E402

GOAL_RATIO = 1.3
GOAL_TOK_S = 8000.0


def log(*a):
    print(*a, file=sys.stderr, flush=True)


def make_prompts(n, length, vocab, seed, avoid=()):
    """n prompts of `length` token ids drawn uniformly from [0, vocab) without the ids in `avoid`."""
    rng = np.random.default_rng(seed)
    allowed = np.setdiff1d(np.arange(vocab), np.array(sorted(avoid), dtype=np.int64))
    return [[int(x) for x in rng.choice(allowed, size=length)] for _ in range(n)]


def request_body(kind, prompt, max_tokens, stream):
    body = {"prompt": prompt, "max_tokens": max_tokens, "temperature": 0, "ignore_eos": True, "stream": stream}
    if stream:
        body["stream_options"] = {"include_usage": True}
    if kind == "tensorfold":
        body["return_token_ids"] = True
    else:
        body["n_predict"] = max_tokens  # llama.cpp's own name; it overrides max_tokens there
    return body


def stream_request(url, kind, prompt, max_tokens, timeout=900, start=None):
    """One streaming completion over a fresh connection, sent at perf_counter() `start` (now when
    None); returns times and counts, or an error."""
    if start is not None:
        time.sleep(max(0.0, start - time.perf_counter()))
    u = urllib.parse.urlsplit(url)
    body = json.dumps(request_body(kind, prompt, max_tokens, True)).encode()
    out = {"t0": time.perf_counter(), "times": [], "counts": [], "ids": [], "usage": None, "error": None}
    conn = http.client.HTTPConnection(u.hostname, u.port, timeout=timeout)
    try:
        conn.request("POST", "/v1/completions", body, {"Content-Type": "application/json"})
        r = conn.getresponse()
        if r.status != 200:
            raise RuntimeError(f"HTTP {r.status}: {r.read(300)!r}")
        while True:
            line = r.readline()
            if not line:
                break
            if not line.startswith(b"data:"):
                continue
            data = line[5:].strip()
            if data == b"[DONE]":
                break
            now = time.perf_counter()
            ev = json.loads(data)
            if "error" in ev:
                raise RuntimeError(f"stream error: {ev['error']}")
            if ev.get("usage"):
                out["usage"] = ev["usage"]
            n = 0
            for ch in ev.get("choices", []):
                if kind == "tensorfold":
                    ids = ch.get("token_ids") or []
                    out["ids"].extend(ids)
                    n += len(ids)
                elif ch.get("text"):
                    n += 1
            if n:
                out["times"].append(now)
                out["counts"].append(n)
        got = sum(out["counts"])
        if out["usage"] is None:
            raise RuntimeError(f"no usage block after {got} tokens")
        if out["usage"].get("completion_tokens") != got or got != max_tokens:
            raise RuntimeError(f"stream carried {got} tokens, usage says {out['usage'].get('completion_tokens')}, "
                               f"asked {max_tokens}")
    except Exception as e:  # noqa: BLE001  (every failure is counted and reported)
        out["error"] = f"{type(e).__name__}: {e}"
    finally:
        conn.close()
    out["end"] = time.perf_counter()
    return out


def _worker_batch(args):
    """Runs one process's share of the streams, each in its own thread from its start time."""
    url, kind, prompts, starts, max_tokens = args
    with cf.ThreadPoolExecutor(max_workers=max(1, len(prompts))) as ex:
        return list(ex.map(lambda ps: stream_request(url, kind, ps[0], max_tokens, start=ps[1]), zip(prompts, starts)))


def run_round(pool, procs, url, kind, prompts, max_tokens, arrival_ms=0.0):
    """The prompts spread over the pool's processes, all at once or request i arrival_ms * i after the
    first; returns per-request results in prompt order."""
    # perf_counter is the system's monotonic clock on Linux, so the client processes share it.
    base = time.perf_counter() + (0.5 if arrival_ms > 0 else 0.0)
    starts = [base + i * arrival_ms / 1000.0 if arrival_ms > 0 else None for i in range(len(prompts))]
    shares = [(prompts[i::procs], starts[i::procs]) for i in range(procs)]
    parts = pool.map(_worker_batch, [(url, kind, p, st, max_tokens) for p, st in shares if p])
    results = [None] * len(prompts)
    for i, part in enumerate(parts):
        for j, res in enumerate(part):
            results[i + j * procs] = res
    return results


def summarize(results, prompt_tokens, max_tokens):
    ok = [r for r in results if r["error"] is None]
    start = min(r["t0"] for r in results)
    wall = max(r["end"] for r in results) - start
    tokens = sum(sum(r["counts"]) for r in ok)
    ttft = [r["times"][0] - r["t0"] for r in ok if r["times"]]
    itl = []
    for r in ok:
        for a, b, n in zip(r["times"], r["times"][1:], r["counts"][1:]):
            itl.extend([(b - a) / n] * n)
    e2e = [r["end"] - r["t0"] for r in ok]
    errors = [r["error"] for r in results if r["error"] is not None]
    ms = lambda xs, q: round(1e3 * pct(xs, q), 3)  # noqa: E731
    return {"requests": len(results), "errors": len(errors), "error_samples": errors[:3],
            "prompt_tokens": prompt_tokens, "gen_tokens": max_tokens, "generated": tokens,
            "wall_s": round(wall, 4), "gen_tok_s": round(tokens / wall, 2) if wall > 0 else 0.0,
            "ttft_p50_ms": ms(ttft, 0.5), "ttft_p99_ms": ms(ttft, 0.99),
            "itl_p50_ms": ms(itl, 0.5), "itl_p99_ms": ms(itl, 0.99), "e2e_p50_ms": ms(e2e, 0.5),
            "e2e_max_ms": ms(e2e, 1.0)}


def greedy_ids(url, kind, prompt, max_tokens):
    """Greedy ids without streaming, and for TensorFold its top-2 logprob gap at each step (else None).

    TensorFold: /v1/completions with return_token_ids and logprobs 2; llama.cpp: its native
    /completion with return_tokens (its OpenAI replies carry no token ids).
    """
    if kind == "tensorfold":
        body = request_body(kind, prompt, max_tokens, False)
        body["logprobs"] = 2
        r = requests.post(url + "/v1/completions", json=body, timeout=600)
        r.raise_for_status()
        ch = r.json()["choices"][0]
        margins = []
        for top in (ch.get("logprobs") or {}).get("top_logprobs") or []:
            vals = sorted(top.values(), reverse=True)
            margins.append(vals[0] - vals[1] if len(vals) >= 2 else None)
        return ch["token_ids"], margins
    body = {"prompt": prompt, "n_predict": max_tokens, "temperature": 0, "ignore_eos": True, "return_tokens": True,
            "cache_prompt": False}
    r = requests.post(url + "/completion", json=body, timeout=600)
    r.raise_for_status()
    return r.json()["tokens"], None


def compare_greedy(a, b):
    """Per prompt: equal, or the first unequal position and TensorFold's top-2 logprob gap there."""
    rows = []
    for i, (x, y) in enumerate(zip(a, b)):
        if x is None or y is None:
            rows.append({"prompt": i, "equal": False, "note": "a request failed"})
            continue
        (xi, margins), (yi, _) = x, y
        if xi == yi:
            rows.append({"prompt": i, "equal": True, "tokens": len(xi),
                         "tf_min_top2_margin": round(min((m for m in margins if m is not None), default=float("nan")), 6)})
            continue
        j = next((k for k, (p, q) in enumerate(zip(xi, yi)) if p != q), min(len(xi), len(yi)))
        row = {"prompt": i, "equal": False, "first_diff": j, "tokens": [len(xi), len(yi)]}
        if j < len(margins) and margins[j] is not None:
            row["tf_top2_margin_at_diff"] = round(margins[j], 6)
        rows.append(row)
    return rows


@contextlib.contextmanager
def llama_server(bin_path, gguf, n, ctx, extra, ready_s):
    """Runs llama-server on a free port until /health answers 200; yields (url, log path); SIGTERMs it."""
    port = server_util.free_port()
    logf = tempfile.NamedTemporaryFile(prefix="llama-server-", suffix=".log", delete=False)
    cmd = [bin_path, "-m", gguf, "--host", "127.0.0.1", "--port", str(port), "-np", str(n), "-c", str(ctx),
           "--cont-batching", "--no-webui"] + extra
    log("starting: " + " ".join(shlex.quote(c) for c in cmd))
    proc = subprocess.Popen(cmd, stdout=logf, stderr=subprocess.STDOUT)
    url = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + ready_s
        while True:
            if proc.poll() is not None:
                raise RuntimeError(f"llama-server exited with {proc.returncode}; log {logf.name}:\n"
                                   + open(logf.name, errors="replace").read()[-3000:])
            try:
                if requests.get(url + "/health", timeout=2).status_code == 200:
                    break
            except requests.RequestException:
                pass
            if time.monotonic() > deadline:
                raise RuntimeError(f"llama-server not ready within {ready_s} s; log {logf.name}")
            time.sleep(0.2)
        yield url, logf.name
    finally:
        proc.terminate()
        try:
            proc.wait(timeout=30)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
        logf.close()


@contextlib.contextmanager
def tf_server(a):
    args = ["--model", a.tf_model, "--parallel", a.streams, "--context", a.prompt_tokens + a.gen_tokens,
            "--device", a.device] + shlex.split(a.tf_args)
    server_util.READY_TIMEOUT_S = a.ready_s
    with server_util.server(args, bin_path=a.tf_bin, check_exit=False) as srv:
        yield srv.url, srv.log_path


def bench_one(kind, url, a, pool, procs, prompts, warm, check):
    log(f"{kind}: warm-up round ({len(warm)} x {a.warmup_tokens} tokens) at {url}")
    wres = run_round(pool, procs, url, kind, warm, a.warmup_tokens)
    werr = [r["error"] for r in wres if r["error"]]
    if werr:
        log(f"{kind}: warm-up errors: {werr[:2]}")
    row = {"server": kind, "url": url, "streams": a.streams, "arrival_ms": a.arrival_ms}
    before = tf_metrics(url) if kind == "tensorfold" else {}
    for rnd in range(a.rounds):
        log(f"{kind}: timed round {rnd + 1}/{a.rounds}: {len(prompts[rnd])} streams x {a.prompt_tokens} + {a.gen_tokens}")
        s = summarize(run_round(pool, procs, url, kind, prompts[rnd], a.gen_tokens, a.arrival_ms), a.prompt_tokens,
                      a.gen_tokens)
        if rnd == 0 or s["gen_tok_s"] > row["gen_tok_s"]:
            row.update(s)
        row.setdefault("rounds_gen_tok_s", []).append(s["gen_tok_s"])
    if kind == "tensorfold":
        row.update(engine_rounds(before, tf_metrics(url)))  # the timed rounds only
    ids = []
    for p in check:
        try:
            ids.append(greedy_ids(url, kind, p, a.check_tokens))
        except Exception as e:  # noqa: BLE001  (reported in the ratio line)
            log(f"{kind}: greedy check failed: {e}")
            ids.append(None)
    row["greedy_digests"] = [digest(x[0])[:16] if x is not None else None for x in ids]
    return row, ids


def tf_metrics(url):
    """TensorFold's /metrics counters as numbers; empty for a server without them."""
    try:
        text = requests.get(url + "/metrics", timeout=10).text
    except requests.RequestException:
        return {}
    v = {}
    for line in text.splitlines():
        parts = line.split()
        if len(parts) == 2 and parts[0].startswith("tensorfold_"):
            v[parts[0]] = float(parts[1])
    return v


def engine_rounds(before, after):
    """TensorFold's rounds between two /metrics snapshots (the timed rounds): the mean decode-only
    round, its forward, the forward's wait on the device and the part before the forward (ms), the
    emit per generated token (us), and the seconds of all rounds by part; empty when the counters
    are missing."""
    v = {k: after[k] - before.get(k, 0.0) for k in after}
    n, gen = v.get("tensorfold_decode_rounds_total", 0), v.get("tensorfold_generation_tokens_total", 0)
    if not n or not gen:
        return {}
    return {"decode_rounds": int(n),
            "decode_round_ms": round(1e3 * v["tensorfold_decode_round_seconds_total"] / n, 3),
            "decode_forward_ms": round(1e3 * v["tensorfold_decode_round_forward_seconds_total"] / n, 3),
            "emit_us_per_token": round(1e6 * v["tensorfold_round_emit_seconds_total"] / gen, 1),
            **{f"decode_{k}_ms": round(1e3 * v[f"tensorfold_decode_round_{k}_seconds_total"] / n, 3)
               for k in ("prepare", "forward_wait") if f"tensorfold_decode_round_{k}_seconds_total" in v},
            "rounds": int(v.get("tensorfold_rounds_total", 0)),
            **{f"rounds_{k}s": round(v[f"tensorfold_round_{k}seconds_total"], 3)
               for k in ("", "forward_", "forward_wait_", "prepare_", "emit_")
               if f"tensorfold_round_{k}seconds_total" in v}}


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("-n", "--streams", type=int, default=64, help="concurrent requests (and lanes / slots)")
    ap.add_argument("-p", "--prompt-tokens", type=int, default=512)
    ap.add_argument("-g", "--gen-tokens", type=int, default=256)
    ap.add_argument("--rounds", type=int, default=1, help="timed rounds per server (fresh prompts each; best reported)")
    ap.add_argument("--arrival-ms", type=float, default=0.0,
                    help="timed rounds send request i this many ms after the first (0: all at once); the lanes "
                         "then decode while later prompts arrive, as under a steady load")
    ap.add_argument("--warmup-tokens", type=int, default=8)
    ap.add_argument("--check-prompts", type=int, default=4, help="prompts compared greedily across servers")
    ap.add_argument("--check-tokens", type=int, default=None, help="tokens per greedy comparison (default -g)")
    ap.add_argument("--vocab", type=int, default=None, help="vocabulary size (default: --tf-model's config.json)")
    ap.add_argument("--seed", type=int, default=1234)
    ap.add_argument("--client-procs", type=int, default=None, help="client processes (default min(8, cores, N))")
    ap.add_argument("--ready-s", type=float, default=600.0, help="seconds a started server may take to load")
    ap.add_argument("--device", default="cuda", help="--device for tensorfold serve")
    ap.add_argument("--tf-url")
    ap.add_argument("--tf-bin", default=None, help=f"tensorfold binary (default {server_util.DEFAULT_BIN})")
    ap.add_argument("--tf-model")
    ap.add_argument("--tf-args", default="", help="more tensorfold serve arguments, one string")
    ap.add_argument("--llama-url")
    ap.add_argument("--llama-bin", default="llama-server")
    ap.add_argument("--llama-gguf")
    ap.add_argument("--llama-args", default="-ngl 999", help="more llama-server arguments, one string")
    ap.add_argument("--order", default="tensorfold,llama.cpp",
                    help="servers to run, in turn: tensorfold, llama.cpp or both (one alone: no ratio)")
    ap.add_argument("--json-out", help="also write the JSON lines here")
    ap.add_argument("--logs-dir", help="copy each started server's log here")
    a = ap.parse_args()
    a.check_tokens = a.check_tokens or a.gen_tokens
    if not a.arrival_ms >= 0:
        ap.error("--arrival-ms must be 0 or more")
    kinds = [k.strip() for k in a.order.split(",")]
    unknown = [k for k in kinds if k not in ("tensorfold", "llama.cpp")]
    if unknown or not kinds:
        ap.error(f"--order: unknown server {unknown[0]!r}" if unknown else "--order: no server")
    if "tensorfold" in kinds and not (a.tf_url or a.tf_model):
        ap.error("give --tf-url or --tf-model")
    if "llama.cpp" in kinds and not (a.llama_url or a.llama_gguf):
        ap.error("give --llama-url or --llama-gguf")
    avoid = set()
    if a.tf_model:
        with open(os.path.join(a.tf_model, "config.json"), encoding="utf-8") as f:
            cfg = json.load(f)
        a.vocab = a.vocab or cfg["vocab_size"]
        for k in ("bos_token_id", "eos_token_id"):
            v = cfg.get(k)
            avoid.update(v if isinstance(v, list) else [v] if v is not None else [])
    if not a.vocab:
        ap.error("--vocab is needed with --tf-url")
    procs = a.client_procs or max(1, min(8, os.cpu_count() or 1, a.streams))
    prompts = [make_prompts(a.streams, a.prompt_tokens, a.vocab, a.seed + 1 + r, avoid) for r in range(a.rounds)]
    warm = make_prompts(a.streams, a.prompt_tokens, a.vocab, a.seed, avoid)
    check = prompts[0][:a.check_prompts]

    rows, ids = {}, {}
    with mp.get_context("spawn").Pool(procs) as pool:
        for kind in kinds:
            if kind == "tensorfold":
                ctx = contextlib.nullcontext((a.tf_url.rstrip("/"), None)) if a.tf_url else tf_server(a)
            elif kind == "llama.cpp":
                ctx = (contextlib.nullcontext((a.llama_url.rstrip("/"), None)) if a.llama_url else
                       llama_server(a.llama_bin, a.llama_gguf, a.streams, a.streams * (a.prompt_tokens + a.gen_tokens),
                                    shlex.split(a.llama_args), a.ready_s))
            else:
                ap.error(f"--order: unknown server {kind!r}")
            t_start = time.perf_counter()
            with ctx as (url, log_path):
                log(f"{kind}: ready after {time.perf_counter() - t_start:.1f} s")
                rows[kind], ids[kind] = bench_one(kind, url, a, pool, procs, prompts, warm, check)
                if log_path and a.logs_dir:
                    os.makedirs(a.logs_dir, exist_ok=True)
                    with open(log_path, errors="replace") as src, \
                            open(os.path.join(a.logs_dir, f"{kind}-server.log"), "w") as dst:
                        dst.write(src.read())
            print(json.dumps(rows[kind]), flush=True)

    tf, ll = rows.get("tensorfold"), rows.get("llama.cpp")
    ratio = {"ratio": "tensorfold/llama.cpp", "streams": a.streams, "prompt_tokens": a.prompt_tokens,
             "gen_tokens": a.gen_tokens}
    if tf and ll:
        r = tf["gen_tok_s"] / ll["gen_tok_s"] if ll["gen_tok_s"] > 0 else None
        ratio.update({"gen_tok_s_ratio": round(r, 4) if r is not None else None,
                      "tensorfold_gen_tok_s": tf["gen_tok_s"], "llama_gen_tok_s": ll["gen_tok_s"],
                      "errors": tf["errors"] + ll["errors"],
                      "goal_ratio": GOAL_RATIO, "goal_tok_s": GOAL_TOK_S,
                      "meets_ratio": bool(r is not None and r >= GOAL_RATIO), "meets_tok_s": tf["gen_tok_s"] > GOAL_TOK_S})
        cmp_rows = compare_greedy(ids["tensorfold"], ids["llama.cpp"])
        ratio["greedy_equal"] = f"{sum(r['equal'] for r in cmp_rows)}/{len(cmp_rows)}"
        ratio["greedy_detail"] = cmp_rows
    print(json.dumps(ratio), flush=True)
    if a.json_out:
        with open(a.json_out, "w", encoding="utf-8") as f:
            for k in rows:
                f.write(json.dumps(rows[k]) + "\n")
            f.write(json.dumps(ratio) + "\n")
    bad = sum(r["errors"] for r in rows.values())
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
