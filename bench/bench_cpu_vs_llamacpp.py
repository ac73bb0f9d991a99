#!/usr/bin/env python3
"""CPU speed of TensorFold against llama.cpp (through llama-cpp-python) on the same GGUF.

Each engine runs in a subprocess of its own, one at a time, so both get the machine alone.
Reps go in ABBA order (T L, L T, T L, ...) so slow drift in machine load hits both engines alike.
Per rep each engine measures:
  pp: prompt processing of --pp random token ids into an empty cache (tokens/s);
  tg: batch-1 greedy generation after a 1-token prompt, --tg tokens, timed from the first
      generated token to the last, so (tg - 1) single-token steps (tokens/s).
TensorFold is measured by `tensorfold bench --json` (rates only, so its load time is excluded);
llama.cpp by llama_cpp.Llama.eval timed with time.perf_counter after a warm-up eval.

    python3 bench/bench_cpu_vs_llamacpp.py --model /tmp/m.gguf --threads 2 --json-out /tmp/r.json
"""
import argparse
import datetime
import hashlib
import json
import os
import platform
import statistics
import subprocess
import sys
import time

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
DEFAULT_TF = os.path.join(REPO, "build", "tensorfold")
AGREE_TOKENS = 16


def llamacpp_worker(a):
    """Runs in its own process: loads the model, warms up, measures one rep, prints JSON."""
    import numpy as np
    import llama_cpp

    llm = llama_cpp.Llama(model_path=a.model, n_threads=a.threads, n_threads_batch=a.threads,
                          n_ctx=a.pp + a.tg + 8, n_batch=512, n_ubatch=512, verbose=False)
    vocab = llm.n_vocab()
    rng = np.random.default_rng(a.seed)
    prompt = rng.integers(0, vocab, size=a.pp).tolist()

    def greedy():
        # Llama.eval keeps no logits unless logits_all, so read the last row from the context.
        row = llama_cpp.llama_get_logits_ith(llm._ctx.ctx, -1)
        return int(np.argmax(np.ctypeslib.as_array(row, shape=(vocab,))))

    llm.reset()
    llm.eval(prompt[:16])  # warm-up: touch weights and scratch, as tensorfold bench does
    out = {}
    if a.worker == "measure":
        llm.reset()  # n_tokens = 0: eval() then drops the whole KV cache before decoding
        t0 = time.perf_counter()
        llm.eval(prompt)
        out["pp_tps"] = a.pp / (time.perf_counter() - t0)

        llm.reset()
        llm.eval([prompt[0]])
        tok = greedy()
        t0 = time.perf_counter()
        for _ in range(a.tg - 1):
            llm.eval([tok])
            tok = greedy()
        out["tg_tps"] = (a.tg - 1) / (time.perf_counter() - t0)
    else:  # greedy tokens for the agreement check
        ids = [int(t) for t in a.agree_ids.split(",")]
        llm.reset()
        llm.eval(ids)
        toks = []
        for _ in range(AGREE_TOKENS):
            tok = greedy()
            toks.append(tok)
            llm.eval([tok])
        out["tokens"] = toks
    print(json.dumps(out), flush=True)


def run_json(cmd, what, env=None):
    p = subprocess.run(cmd, capture_output=True, text=True, env=env)
    if p.returncode != 0:
        sys.exit(f"bench_cpu_vs_llamacpp: {what} failed (rc={p.returncode}): {' '.join(cmd)}\n"
                 f"{p.stderr[-2000:]}")
    lines = [l for l in p.stdout.splitlines() if l.startswith("{")]
    if not lines:
        sys.exit(f"bench_cpu_vs_llamacpp: {what} printed no JSON: {p.stdout[-2000:]}")
    return json.loads(lines[-1])


def measure_tf(a, rep):
    r = run_json([a.tensorfold, "bench", "--model", a.model, "--pp", str(a.pp), "--tg", str(a.tg),
                  "--batch", "1", "--reps", "1", "--threads", str(a.threads), "--json"], "tensorfold bench")
    if r.get("threads") != a.threads:
        sys.exit(f"bench_cpu_vs_llamacpp: tensorfold ran with {r.get('threads')} threads, asked {a.threads}")
    return {"pp_tps": r["pp_tps"], "tg_tps": r["tg_tps"]}


def worker_cmd(a, mode, seed=0, ids=None):
    cmd = [sys.executable, os.path.abspath(__file__), "--worker", mode, "--model", a.model,
           "--threads", str(a.threads), "--pp", str(a.pp), "--tg", str(a.tg), "--seed", str(seed)]
    if ids:
        cmd += ["--agree-ids", ",".join(map(str, ids))]
    return cmd


def measure_llamacpp(a, rep):
    return run_json(worker_cmd(a, "measure", seed=1000 + rep), "llama.cpp worker", llamacpp_env(a))


def llamacpp_env(a):
    # llama.cpp's OpenMP threads spin at barriers; on a shared, oversubscribed machine that stalls it.
    if not a.omp_wait_policy:
        return None
    return dict(os.environ, OMP_WAIT_POLICY=a.omp_wait_policy)


def agreement(a):
    """Greedy tokens of both engines after the same 8-token prompt; information only."""
    ids = [1, 450, 4996, 17354, 1701, 432, 17204, 975]
    ids = [i % 32000 for i in ids]
    p = subprocess.run([a.tensorfold, "run", "--model", a.model, "--prompt-ids", ",".join(map(str, ids)),
                        "--ids", "--temperature", "0", "--max-tokens", str(AGREE_TOKENS),
                        "--threads", str(a.threads)], capture_output=True, text=True)
    if p.returncode != 0:
        return {"error": f"tensorfold run rc={p.returncode}: {p.stderr[-500:]}"}
    tf = [int(t) for t in p.stdout.strip().splitlines()[-1].split(",") if t.strip()]
    lc = run_json(worker_cmd(a, "agree", ids=ids), "llama.cpp agreement worker", llamacpp_env(a))["tokens"]
    n = min(len(tf), len(lc))
    prefix = next((i for i in range(n) if tf[i] != lc[i]), n)
    return {"prompt_ids": ids, "tensorfold": tf, "llamacpp": lc, "same_prefix": prefix,
            "same_positions": sum(tf[i] == lc[i] for i in range(n)), "compared": n}


def wait_for_load(a):
    """On a shared machine, waits (up to --wait-max s) for the 1-minute load to drop below --wait-load."""
    if a.wait_load is None:
        return
    deadline = time.monotonic() + a.wait_max
    while os.getloadavg()[0] >= a.wait_load and time.monotonic() < deadline:
        time.sleep(5)


def summary(xs):
    return {"best": max(xs), "median": statistics.median(xs), "all": xs}


def file_info(path):
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for chunk in iter(lambda: f.read(1 << 20), b""):
            h.update(chunk)
    st = os.stat(path)
    return {"path": path, "mtime": datetime.datetime.fromtimestamp(st.st_mtime).isoformat(timespec="seconds"),
            "sha256": h.hexdigest()[:16]}


def cpu_model():
    try:
        out = subprocess.run(["lscpu"], capture_output=True, text=True).stdout
        for line in out.splitlines():
            if line.startswith("Model name:"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor()


def llamacpp_info():
    code = ("import json, llama_cpp; print(json.dumps({'version': llama_cpp.__version__, "
            "'system_info': llama_cpp.llama_print_system_info().decode()}))")
    p = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    if p.returncode != 0:
        sys.exit(f"bench_cpu_vs_llamacpp: cannot import llama_cpp: {p.stderr[-1000:]}")
    return json.loads(p.stdout.strip().splitlines()[-1])


def main():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--model", required=True, help="llama GGUF file")
    p.add_argument("--threads", type=int, default=2)
    p.add_argument("--pp", type=int, default=512)
    p.add_argument("--tg", type=int, default=128)
    p.add_argument("--reps", type=int, default=3)
    p.add_argument("--tensorfold", default=DEFAULT_TF, help="tensorfold binary (default: %(default)s)")
    p.add_argument("--json-out", help="write the results here as JSON")
    p.add_argument("--wait-load", type=float, help="before each measurement wait for the 1-minute load "
                   "average to fall below this (default: no wait)")
    p.add_argument("--wait-max", type=float, default=120, help="longest wait per measurement, s")
    p.add_argument("--omp-wait-policy", choices=["active", "passive"],
                   help="OMP_WAIT_POLICY for llama.cpp (default: unset, llama.cpp spins)")
    p.add_argument("--no-agree", action="store_true", help="skip the greedy-token agreement check")
    p.add_argument("--worker", choices=["measure", "agree"], help=argparse.SUPPRESS)
    p.add_argument("--seed", type=int, default=0, help=argparse.SUPPRESS)
    p.add_argument("--agree-ids", help=argparse.SUPPRESS)
    a = p.parse_args()
    if a.worker:
        return llamacpp_worker(a)
    if not os.path.isfile(a.model):
        sys.exit(f"bench_cpu_vs_llamacpp: model not found: {a.model}")
    if not os.access(a.tensorfold, os.X_OK):
        sys.exit(f"bench_cpu_vs_llamacpp: tensorfold binary not executable: {a.tensorfold}")
    if a.pp < 1 or a.tg < 2 or a.reps < 1 or a.threads < 1:
        sys.exit("bench_cpu_vs_llamacpp: need --pp >= 1, --tg >= 2, --reps >= 1, --threads >= 1")

    info = {"date": datetime.datetime.now().isoformat(timespec="seconds"), "cpu": cpu_model(),
            "nproc": os.cpu_count(), "load_before": os.getloadavg(), "model": os.path.abspath(a.model),
            "model_mib": round(os.path.getsize(a.model) / 2**20, 1), "threads": a.threads, "pp": a.pp,
            "tg": a.tg, "reps": a.reps, "tensorfold": file_info(a.tensorfold), "llamacpp": llamacpp_info(),
            "omp_wait_policy": a.omp_wait_policy}
    res = {"tensorfold": [], "llamacpp": []}
    engines = {"tensorfold": measure_tf, "llamacpp": measure_llamacpp}
    for rep in range(a.reps):
        order = ["tensorfold", "llamacpp"] if rep % 2 == 0 else ["llamacpp", "tensorfold"]
        for name in order:
            wait_for_load(a)
            load = os.getloadavg()[0]
            r = engines[name](a, rep)
            r["load1"] = load
            res[name].append(r)
            print(f"rep {rep} {name:10s} pp {r['pp_tps']:9.1f} tok/s  tg {r['tg_tps']:7.2f} tok/s  (load {load:.2f})",
                  file=sys.stderr, flush=True)
    info["load_after"] = os.getloadavg()
    after = file_info(a.tensorfold)
    if after != info["tensorfold"]:
        info["tensorfold_changed_during_run"] = after
        print("warning: the tensorfold binary changed during the run", file=sys.stderr)

    table = {}
    for name in engines:
        table[name] = {k: summary([r[k] for r in res[name]]) for k in ("pp_tps", "tg_tps")}
    ratio = {k: {s: table["tensorfold"][k][s] / table["llamacpp"][k][s] for s in ("best", "median")}
             for k in ("pp_tps", "tg_tps")}
    out = {"info": info, "results": table, "ratio_tensorfold_over_llamacpp": ratio}
    if not a.no_agree:
        out["greedy_agreement"] = agreement(a)

    name = os.path.basename(a.model)
    print(f"\n{name}, {a.threads} threads, pp {a.pp}, tg {a.tg}, {a.reps} reps (ABBA), "
          f"load {info['load_before'][0]:.2f} -> {info['load_after'][0]:.2f}"
          + (f", llama.cpp OMP_WAIT_POLICY={a.omp_wait_policy}" if a.omp_wait_policy else "") + "\n")
    print("| engine | pp tok/s best | pp tok/s median | tg tok/s best | tg tok/s median |")
    print("|---|---:|---:|---:|---:|")
    for eng, label in (("tensorfold", "TensorFold"), ("llamacpp", f"llama.cpp ({info['llamacpp']['version']})")):
        t = table[eng]
        print(f"| {label} | {t['pp_tps']['best']:.1f} | {t['pp_tps']['median']:.1f} | "
              f"{t['tg_tps']['best']:.2f} | {t['tg_tps']['median']:.2f} |")
    print(f"| TensorFold / llama.cpp | {ratio['pp_tps']['best']:.2f}x | {ratio['pp_tps']['median']:.2f}x | "
          f"{ratio['tg_tps']['best']:.2f}x | {ratio['tg_tps']['median']:.2f}x |")
    if "greedy_agreement" in out:
        g = out["greedy_agreement"]
        if "error" in g:
            print(f"\ngreedy agreement: {g['error']}")
        else:
            print(f"\ngreedy agreement (information only): same first {g['same_prefix']} of {g['compared']} "
                  f"tokens, {g['same_positions']} positions equal")
    if a.json_out:
        with open(a.json_out, "w") as f:
            json.dump(out, f, indent=1)
            f.write("\n")


if __name__ == "__main__":
    main()
