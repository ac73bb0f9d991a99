"""A hybrid model (Mamba2 + attention + MoE: models/hybrid-nemotron) through the HTTP server: the
prompt cache resumes recurrent state at chunk marks with replies equal to a cold server, concurrent
replies equal solo ones, and /memory reports the state pool and the kept snapshots."""
import concurrent.futures
import sys
from pathlib import Path

import pytest

from server_util import REPO, cache_fixtures

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "bench"))
from bench_restore import complete, prompt_ids, wait_idle_census  # noqa: E402

MODEL = str(REPO / "models" / "hybrid-nemotron")
CHUNK = 32
PARALLEL = 3
BASE = ["--model", MODEL, "--threads", 2, "--parallel", PARALLEL, "--chunk", CHUNK, "--context", 512]
MODES = [{"temperature": 0.0}, {"temperature": 0.9, "top_p": 0.95, "seed": 5}]

cold, warm = cache_fixtures(BASE)


@pytest.mark.parametrize("mode", range(len(MODES)))
def test_resumed_state_equals_cold(cold, warm, mode):
    samp = MODES[mode]
    base = prompt_ids(300 + mode, 150)
    want = complete(cold.url, base, 10, samp)
    assert complete(warm.url, base, 10, samp)["ids"] == want["ids"]
    again = complete(warm.url, base, 10, samp)
    assert again["cached"] == 128, f"a 150-token prompt resumes at the mark 128, not {again['cached']}"
    assert again["ids"] == want["ids"], "SERVER BUG: a reply resumed from a kept recurrent state differs from cold"
    # Prompts sharing a prefix of the first resume from the last shared mark.
    for shared in (40, 70, 100):
        p = base[:shared] + prompt_ids(400 + shared, 20)
        got = complete(warm.url, p, 6, samp)
        assert got["cached"] == shared // CHUNK * CHUNK, (shared, got["cached"])
        assert got["ids"] == complete(cold.url, p, 6, samp)["ids"], f"resumed at {got['cached']} differs from cold"
    census = wait_idle_census(warm.url)
    assert census["pages_used"] == 0, census


def test_concurrent_equals_solo(cold):
    prompts = [prompt_ids(500 + i, n) for i, n in enumerate((5, 33, 64, 90, 130, 17))]
    solo = [complete(cold.url, p, 8, MODES[i % 2])["ids"] for i, p in enumerate(prompts)]
    with concurrent.futures.ThreadPoolExecutor(len(prompts)) as pool:
        futs = [pool.submit(complete, cold.url, p, 8, MODES[i % 2]) for i, p in enumerate(prompts)]
        both = [f.result()["ids"] for f in futs]
    assert both == solo, "SERVER BUG: a hybrid model's reply depends on the other requests in flight"


def test_memory_reports_recurrent_state(warm):
    complete(warm.url, prompt_ids(600, 70), 2, MODES[0])
    m = warm.wait_idle()
    st = m["recurrent_state"]
    assert st["slots"] == 2 * PARALLEL + 3, st
    assert st["slots_used"] == 0, f"state slots held by idle lanes: {st}"
    assert st["slot_bytes"] > 0 and st["kept"] >= 1 and st["kept_bytes"] == st["kept"] * st["slot_bytes"], st
    assert m["kv_pool"]["page_bytes"] > 0
