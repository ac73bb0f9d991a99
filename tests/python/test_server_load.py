"""64 concurrent clients against one server: no errors, the KV census holds, RSS stays flat."""
import importlib.util

from server_util import REPO, server


def _load_test():
    spec = importlib.util.spec_from_file_location("load_test", REPO / "bench" / "load_test.py")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def test_64_clients(tensorfold_bin):
    lt = _load_test()
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
             if line.startswith("tensorfold_round")}
    total = value["tensorfold_round_seconds_total"]
    assert 0 < value["tensorfold_round_forward_seconds_total"] <= total, value
    assert 0 < value["tensorfold_round_emit_seconds_total"] <= total, value
    assert value["tensorfold_round_forward_seconds_total"] + value["tensorfold_round_emit_seconds_total"] <= total


def test_long_prompts_being_tokenized_leave_the_io_threads_free(tensorfold_bin):
    # Two 6 MB prompts to tokenize, one for each of the server's two io threads; a GET sent while
    # they are tokenized must be answered at once, not after them. Measured as a share of a long
    # request's own time, so the machine's speed cancels out.
    import random
    import string
    import threading
    import time

    import requests

    rng = random.Random(3)
    big = "".join(rng.choice(string.ascii_letters + string.digits) for _ in range(6_000_000))
    spans = {}
    with server(["--parallel", 1, "--threads", 2], bin_path=tensorfold_bin) as srv:
        def post(i):
            t0 = time.monotonic()
            r = requests.post(srv.url + "/tokenize", json={"prompt": big}, timeout=120)
            spans[i] = (time.monotonic() - t0, r.status_code, r.json().get("count", 0))

        posts = [threading.Thread(target=post, args=(i,)) for i in range(2)]
        for t in posts:
            t.start()
        time.sleep(0.5)  # both bodies are in and being tokenized
        t0 = time.monotonic()
        h = requests.get(srv.url + "/v1/models", timeout=120)
        get_s = time.monotonic() - t0
        for t in posts:
            t.join()
    assert h.status_code == 200
    assert all(code == 200 and count > 1_000_000 for _, code, count in spans.values()), spans
    long_s = min(s for s, _, _ in spans.values())
    print(f"GET {get_s * 1e3:.1f} ms while two long prompts took {long_s:.2f} s")
    assert get_s < 0.1 * long_s, f"the GET took {get_s:.2f} s while long prompts ({long_s:.2f} s) were tokenized"
