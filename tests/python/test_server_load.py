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
