"""Token ids do not depend on concurrency: bench/bench_concurrent.py's core at --parallel 1, 2 and 4."""
import importlib.util

from server_util import REPO


def _bench():
    spec = importlib.util.spec_from_file_location("bench_concurrent", REPO / "bench" / "bench_concurrent.py")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def test_concurrent_equals_solo_across_levels(tensorfold_bin):
    bench = _bench()
    lines = []
    results = bench.run([1, 2, 4], n_prompts=4, max_tokens=12, bin_path=tensorfold_bin, out=lines.append)
    report = "\n".join(lines)
    for level, r in results.items():
        assert r["failed"] == 0, report
        assert r["unequal"] == 0, report
        assert len(r["solo"]) == r["requests"] == 8
    # The seeded and greedy replies differ, so equality above is not trivially true.
    solo = results[1]["solo"]
    assert any(solo[("t0", i)] != solo[("t1", i)] for i in range(4))
    assert len({tuple(v) for v in solo.values()}) == len(solo)


def _all_equal(tensorfold_bin, **kw):
    """bench_concurrent at --parallel 1 and 4: every reply equal, none failed; returns the module."""
    bench = _bench()
    lines = []
    results = bench.run([1, 4], n_prompts=4, bin_path=tensorfold_bin, out=lines.append, **kw)
    for r in results.values():
        assert r["failed"] == 0 and r["unequal"] == 0, "\n".join(lines)
    return bench


def test_concurrent_equals_solo_with_bf16_matmul_input(tensorfold_bin):
    bench = _all_equal(tensorfold_bin, max_tokens=8, server_args=("--matmul-input", "bf16"))
    with bench.server(["--parallel", 1, "--threads", 2, "--matmul-input", "bf16"], bin_path=tensorfold_bin) as srv:
        assert srv.memory()["device"]["matmul_input"] == "bf16"


def test_concurrent_equals_solo_with_events_on_the_delivery_thread(tensorfold_bin, monkeypatch):
    # TF_SERVER_DELIVERY=thread hands token events to a delivery thread instead of the engine's.
    monkeypatch.setenv("TF_SERVER_DELIVERY", "thread")
    _all_equal(tensorfold_bin, max_tokens=12)


def test_concurrent_equals_solo_with_rounds_of_several_prompts(tensorfold_bin):
    # A 16-token grid and a budget of 256: several prompts' chunks share each round.
    _all_equal(tensorfold_bin, max_tokens=8, server_args=("--chunk", "16", "--round-tokens", "256"))
