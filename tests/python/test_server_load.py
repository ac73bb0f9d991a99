"""64 concurrent clients against one server: no errors, the KV census holds, RSS stays flat; long
prompts leave the io threads free, and the bodies waiting for the request threads are capped."""
import importlib.util
import os
import subprocess
import threading
import time

import requests

from server_util import REPO, server


def _load(name):
    spec = importlib.util.spec_from_file_location(name, REPO / "bench" / f"{name}.py")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def test_64_clients(tensorfold_bin):
    lt = _load("load_test")
    lines = []
    with server(["--parallel", 8, "--threads", 2], bin_path=tensorfold_bin) as srv:
        s = lt.run_load(srv.url, clients=64, requests_each=1, max_tokens=4, warmup=8, out=lines.append)
        metrics = srv.get("/metrics").text
    report = "\n".join(lines)
    assert s["errors"] == [], report
    assert s["requests"] == 64 and s["tokens"] == 64 * 4, report
    assert s["census_ok"] and s["idle"], report
    assert s["pages_used"] == 0 and s["pages_free"] + s["pages_kept"] == s["pages_total"], report
    assert s["rss_delta_mb"] < 16, report
    assert 'tensorfold_requests_total{endpoint="/v1/completions",status="200"}' in metrics
    assert "tensorfold_lanes_busy 0" in metrics
    # Engine-thread seconds: a round holds its forward and its emit, so neither passes it.
    value = {line.split()[0]: float(line.split()[1]) for line in metrics.splitlines()
             if line.startswith(("tensorfold_round", "tensorfold_decode_round"))}
    total = value["tensorfold_round_seconds_total"]
    assert 0 < value["tensorfold_round_forward_seconds_total"] <= total, value
    assert 0 < value["tensorfold_round_emit_seconds_total"] <= total, value
    parts = ("prepare", "forward", "emit")
    assert 0 < value["tensorfold_round_prepare_seconds_total"] < total, value
    assert sum(value[f"tensorfold_round_{p}_seconds_total"] for p in parts) <= total, value
    # The cpu backend never blocks on a device.
    assert value["tensorfold_round_forward_wait_seconds_total"] == 0, value
    # Decode-only rounds (4 tokens a request: most rounds) are a part of all rounds.
    rounds = {line.split()[0]: float(line.split()[1]) for line in metrics.splitlines()
              if line.startswith(("tensorfold_rounds_total", "tensorfold_decode_rounds_total"))}
    assert 0 < rounds["tensorfold_decode_rounds_total"] < rounds["tensorfold_rounds_total"], rounds
    decode = value["tensorfold_decode_round_seconds_total"]
    assert 0 < value["tensorfold_decode_round_forward_seconds_total"] <= decode < total, value
    assert 0 < value["tensorfold_decode_round_prepare_seconds_total"] < value["tensorfold_round_prepare_seconds_total"]
    assert value["tensorfold_decode_round_forward_wait_seconds_total"] == 0, value


def test_long_prompts_being_tokenized_leave_the_io_threads_free(tensorfold_bin):
    # Two 6 MB prompts to tokenize, one for each of the server's two io threads; a GET sent while
    # they are tokenized must be answered at once, not after them. Measured as a share of a long
    # request's own time, so the machine's speed cancels out.
    bench = _load("bench_tokenize_concurrent")
    with server(["--parallel", 1, "--threads", 2], bin_path=tensorfold_bin) as srv:
        spans, get_s = bench.measure(srv.url, bench.random_texts(2, 6), get_after=0.5)
    assert all(code == 200 and count > 1_000_000 for _, code, count in spans), spans
    long_s = min(s for s, _, _ in spans)
    print(f"GET {get_s * 1e3:.1f} ms while two long prompts took {long_s:.2f} s")
    assert get_s < 0.1 * long_s, f"the GET took {get_s:.2f} s while long prompts ({long_s:.2f} s) were tokenized"


def test_request_bodies_waiting_are_capped_in_bytes(tensorfold_bin):
    # --max-queue-mib 16: a 9 MB prompt being tokenized holds 9 of the 16 MiB, so a second 9 MB body
    # is refused with 429 at once; once the first is handled its bytes are free again.
    bench = _load("bench_tokenize_concurrent")
    slow = bench.random_texts(1, 9)[0]
    cheap = "ab " * 3_000_000
    with server(["--parallel", 1, "--threads", 2, "--max-queue-mib", 16], bin_path=tensorfold_bin) as srv:
        first = {}
        t = threading.Thread(target=lambda: first.update(r=requests.post(srv.url + "/tokenize", json={"prompt": slow},
                                                                          timeout=600)))
        t.start()
        time.sleep(1.0)
        refused = requests.post(srv.url + "/tokenize", json={"prompt": cheap}, timeout=600)
        t.join()
        # The request thread lets go of the first body just after its reply is sent.
        for _ in range(50):
            after = requests.post(srv.url + "/tokenize", json={"prompt": cheap}, timeout=600)
            if after.status_code != 429:
                break
            time.sleep(0.1)
        metrics = srv.get("/metrics").text
    assert first["r"].status_code == 200, first["r"].text[:300]
    assert refused.status_code == 429, refused.text[:300]
    assert "--max-queue-mib" in refused.json()["error"]["message"], refused.text[:300]
    assert after.status_code == 200 and after.json()["count"] > 1_000_000, after.text[:300]
    assert 'status="429"' in metrics


def test_queue_bytes_below_one_body_is_refused_at_start(tensorfold_bin):
    r = subprocess.run([str(tensorfold_bin), "serve", "--max-queue-mib", "8"], capture_output=True, text=True, timeout=60)
    assert r.returncode != 0 and "--max-queue-mib" in r.stderr, r.stderr[-500:]


def test_unknown_delivery_mode_is_refused_at_start(tensorfold_bin):
    env = dict(os.environ, TF_SERVER_DELIVERY="threads")
    r = subprocess.run([str(tensorfold_bin), "serve", "--port", "0"], capture_output=True, text=True, timeout=60, env=env)
    assert r.returncode > 0 and "TF_SERVER_DELIVERY must be thread or inline" in r.stderr, r.stderr[-500:]


def test_round_budget_below_a_chunk_is_refused_at_start(tensorfold_bin):
    r = subprocess.run([str(tensorfold_bin), "serve", "--port", "0", "--chunk", "512", "--round-tokens", "256"],
                       capture_output=True, text=True, timeout=60)
    assert r.returncode > 0 and "--round-tokens 256 is less than one --chunk of 512" in r.stderr, r.stderr[-500:]
