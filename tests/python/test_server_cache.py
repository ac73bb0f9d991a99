"""Prompt cache through the HTTP server: resumed equals cold, cache_salt isolation, the planner's cap, cache off, census after eviction."""
import re
import subprocess
import sys
from pathlib import Path

import pytest

from server_util import cache_fixtures, free_port, server

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "bench"))
from bench_restore import complete, prompt_ids, wait_idle_census  # noqa: E402

CHUNK = 64
BASE = ["--threads", 2, "--parallel", 2, "--chunk", CHUNK, "--context", 1024]
MODES = [{"temperature": 0.0}, {"temperature": 1.0, "top_p": 0.95, "seed": 11}]

cold, warm = cache_fixtures(BASE)


def cached(url, prompt, salt=None, sampling=None, max_tokens=4):
    return complete(url, prompt, max_tokens, sampling or {"temperature": 0.0}, salt=salt)


@pytest.mark.parametrize("mode", range(len(MODES)))
def test_resumed_equals_cold(cold, warm, mode):
    prompt = prompt_ids(100 + mode, 600)
    samp = MODES[mode]
    want = complete(cold.url, prompt, 12, samp)
    first = complete(warm.url, prompt, 12, samp)
    second = complete(warm.url, prompt, 12, samp)
    streamed = complete(warm.url, prompt, 12, samp, stream=True)
    assert first["ids"] == want["ids"], "a fresh warm-server reply differs from the cold server"
    assert second["cached"] and second["cached"] > 0, f"no cache hit on a repeated prompt: {second['cached']}"
    # the adopted prefix ends on a chunk mark strictly before the last prompt token
    assert second["cached"] % CHUNK == 0 and second["cached"] < len(prompt), second["cached"]
    assert second["ids"] == want["ids"], "SERVER BUG: a reply resumed from the prompt cache differs from cold"
    assert streamed["cached"] > 0 and streamed["ids"] == want["ids"], "SERVER BUG: streamed resume differs from cold"
    assert want["cached"] == 0


def test_cache_salt_isolation(warm):
    prompt = prompt_ids(200, 400)
    assert cached(warm.url, prompt, salt="tenant-a")["cached"] == 0
    assert cached(warm.url, prompt, salt="tenant-b")["cached"] == 0, "SERVER BUG: another tenant's salt hit the cache"
    assert cached(warm.url, prompt)["cached"] == 0, "SERVER BUG: an unsalted request hit a salted entry"
    assert cached(warm.url, prompt, salt="tenant-a")["cached"] > 0, "same salt must hit"
    assert cached(warm.url, prompt, salt="tenant-b")["cached"] > 0, "same salt must hit"


def run_serve(bin_path, *args, timeout=60):
    cmd = [bin_path, "serve", "--port", str(free_port()), "--threads", "2"] + [str(a) for a in args]
    return subprocess.run(cmd, capture_output=True, text=True, timeout=timeout)


def test_cap_message(tensorfold_bin):
    r = run_serve(tensorfold_bin, "--prompt-cache-gib", 100000)
    assert r.returncode != 0, "a cache far above the planner's cap must stop startup"
    assert "cap is" in r.stderr and "--prompt-cache-over-cap" in r.stderr, r.stderr
    assert r.returncode > 0, f"killed by signal {-r.returncode}, not a clean exit: {r.stderr}"


def test_over_cap_huge_is_a_clean_error_or_runs(tensorfold_bin):
    try:
        r = run_serve(tensorfold_bin, "--prompt-cache-gib", 100000, "--prompt-cache-over-cap", timeout=10)
    except subprocess.TimeoutExpired:
        pytest.skip("the OS accepted a 100000 GiB lazy mapping and the server came up")
    assert r.returncode > 0, f"not a clean exit (code {r.returncode}): {r.stderr[-2000:]}"
    assert "error" in r.stderr.lower() and "terminate" not in r.stderr and "Abort" not in r.stderr, r.stderr


def test_over_cap_moderate_starts_and_caches(tensorfold_bin):
    msg = run_serve(tensorfold_bin, "--prompt-cache-gib", 100000).stderr
    m = re.search(r"cap is ([0-9.]+) GiB", msg)
    assert m, msg
    ask = float(m.group(1)) + 1.0
    with server(["--threads", 2, "--parallel", 1, "--chunk", CHUNK, "--context", 1024, "--prompt-cache-gib", ask,
                 "--prompt-cache-over-cap"], bin_path=tensorfold_bin) as srv:
        plan = srv.memory()["plan"]
        assert plan["cache_bytes"] > plan["budget_bytes"], plan
        prompt = prompt_ids(300, 300)
        cached(srv.url, prompt)
        assert cached(srv.url, prompt)["cached"] > 0


def test_cache_off(tensorfold_bin):
    with server(["--threads", 2, "--parallel", 1, "--chunk", CHUNK, "--context", 1024, "--prompt-cache-gib", 0],
                bin_path=tensorfold_bin) as srv:
        assert srv.memory()["plan"]["cache_pages"] == 0
        prompt = prompt_ids(400, 300)
        for _ in range(3):
            assert cached(srv.url, prompt)["cached"] == 0, "SERVER BUG: --prompt-cache-gib 0 still adopts a prefix"
        m = srv.wait_idle()
        assert m["kv_pool"]["pages_kept"] == 0 and m["prompt_cache"]["hits"] == 0, m


@pytest.mark.parametrize("host_tier", [False, True])
def test_round_robin_eviction_keeps_census_clean(tensorfold_bin, cold, host_tier):
    # 4 conversations of ~300 tokens, a cache for about 2 of them
    page_bytes = cold.memory()["kv_pool"]["page_bytes"]
    gib = 2 * (340 // 16 + 1) * page_bytes / 2**30
    args = BASE + ["--prompt-cache-gib", f"{gib:.6f}"] + (["--host-cache-gib", f"{4 * gib:.6f}"] if host_tier else [])
    convs = [prompt_ids(500 + c, 300) for c in range(4)]
    with server(args, bin_path=tensorfold_bin) as srv:
        for rnd in range(2):
            for c in range(4):
                samp = MODES[c % 2]
                got = complete(srv.url, convs[c], 6, samp)
                assert got["ids"] == complete(cold.url, convs[c], 6, samp)["ids"], \
                    f"SERVER BUG: round {rnd} conversation {c} differs from cold after eviction"
                convs[c] = convs[c] + got["ids"] + prompt_ids(600 + 10 * c + rnd, 12)
            cz = wait_idle_census(srv.url)
            assert cz["ok"] and cz["pages_used"] == 0, f"SERVER BUG: census after round {rnd}: {cz}"
        pc = srv.memory()["prompt_cache"]
        assert pc["evictions"] > 0, f"the cache never evicted: {pc}"
        if host_tier:
            assert pc["restores"] > 0, f"the host tier never restored: {pc}"


def test_echo_logprobs_on_a_repeated_prompt_equal_cold(cold, warm):
    # echo + logprobs needs a logit at every prompt position, so a cached prefix must not skip them
    prompt = prompt_ids(700, 300)
    body = {"prompt": prompt, "max_tokens": 2, "temperature": 0.0, "echo": True, "logprobs": 1}

    def prompt_logprobs(srv):
        j = srv.post("/v1/completions", body).json()
        return j["choices"][0]["logprobs"]["token_logprobs"][:len(prompt)], j["usage"]["prompt_tokens_details"]["cached_tokens"]

    want, _ = prompt_logprobs(cold)
    prompt_logprobs(warm)
    got, hit = prompt_logprobs(warm)
    assert want[0] is None and all(x is not None for x in want[1:])
    bad = [i for i, (a, b) in enumerate(zip(got, want)) if (a is None) != (b is None) or (a is not None and abs(a - b) > 1e-4)]
    assert not bad, (f"SERVER BUG: echo+logprobs on a repeated prompt (cached_tokens {hit}) gives wrong prompt logprobs at "
                     f"{len(bad)} positions from {bad[0]}: the engine adopts a cached prefix (src/engine/engine.cpp try_admit, "
                     f"reuse_tokens) although the request has on_logits, so on_logits starts at the first uncached position "
                     f"and ApiJob::on_logits files them as positions 1, 2, ...")


def test_bf16_mode_halves_the_pages_and_resumes_equal_cold_through_the_host_tier(tensorfold_bin, cold):
    # --matmul-input bf16 on the CPU stores K and V as bf16: pages of half the bytes, and replies
    # resumed from the device tier or restored from the host tier equal a cold bf16 server's.
    args = BASE + ["--matmul-input", "bf16"]
    convs = [prompt_ids(800 + c, 300) for c in range(4)]
    with server(args + ["--prompt-cache-gib", 0], bin_path=tensorfold_bin) as bcold:
        page_bytes = bcold.memory()["kv_pool"]["page_bytes"]
        assert 2 * page_bytes == cold.memory()["kv_pool"]["page_bytes"], (page_bytes, cold.memory()["kv_pool"])
        want = [complete(bcold.url, p, 6, MODES[c % 2])["ids"] for c, p in enumerate(convs)]
    gib = 2 * (340 // 16 + 1) * page_bytes / 2**30
    with server(args + ["--prompt-cache-gib", f"{gib:.6f}", "--host-cache-gib", f"{4 * gib:.6f}"],
                bin_path=tensorfold_bin) as srv:
        for rnd in range(2):
            for c in range(4):
                got = complete(srv.url, convs[c], 6, MODES[c % 2])
                assert got["ids"] == want[c], f"SERVER BUG: bf16 mode, round {rnd} conversation {c} differs from cold"
                if rnd == 1:
                    assert got["cached"] > 0, f"round 2 conversation {c} missed the cache: {got['cached']}"
        pc = srv.memory()["prompt_cache"]
        assert pc["restores"] > 0, f"the host tier never restored: {pc}"
