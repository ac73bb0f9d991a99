"""tests/gpu/warp_states.py: one decode step's kernels with their largest stall reasons, from
Nsight Compute's raw CSV of the warp state, launch and speed-of-light sections (plain or xz)."""
import lzma
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO / "tests" / "gpu"))
import warp_states  # noqa: E402

STALLS = ("no_instruction", "long_scoreboard", "barrier")
HEAD = ('"ID","Kernel Name","Grid Size","gpu__time_duration.sum",'
        + ",".join(f'"smsp__average_warps_issue_stalled_{s}_per_issue_active.ratio"' for s in STALLS)
        + ',"dram__throughput.avg.pct_of_peak_sustained_elapsed","sm__throughput.avg.pct_of_peak_sustained_elapsed"')
UNITS = '"","","","nsecond","ratio","ratio","ratio","%","%"'
ROUTE = "void tf::cuda::<unnamed>::moe_route_kernel<0>(const float *, int)"
NORM = "void tf::cuda::<unnamed>::rmsnorm_kernel<1>(float *, const float *)"
FOLD = "void tf::cuda::<unnamed>::argmax_fold_kernel(const float *, long)"


def row(i, name, ns, stalls, dram, sm):
    return (f'"{i}","{name}","(1, 1, 1)","{ns}",' + ",".join(f'"{v}"' for v in stalls) + f',"{dram}","{sm}"')


def csv_text(with_stalls=True):
    kernels = [(FOLD, "4,000", (0.5, 1.0, 0.0), 1, 2), (ROUTE, "15,500", (3.2, 0.4, 1.1), 0.1, 1),
               (NORM, "4,100", (0.8, 2.1, 0.3), 10, 3), (FOLD, "3,900", (0.5, 1.0, 0.0), 1, 2)]
    head, units = HEAD, UNITS
    if not with_stalls:
        head = '"ID","Kernel Name","Grid Size","gpu__time_duration.sum"'
        units = '"","","","nsecond"'
        lines = [f'"{i}","{n}","(1, 1, 1)","{ns}"' for i, (n, ns, *_) in enumerate(kernels)]
    else:
        lines = [row(i, *k) for i, k in enumerate(kernels)]
    return "\n".join(["==PROF== Connected to process 7", head, units] + lines) + "\n"


def test_the_last_step_in_launch_order_with_its_stalls():
    states = warp_states.step_states(warp_states.step_kernels.kernel_rows(csv_text()))
    assert [s[0] for s in states] == ["moe_route_kernel<0>", "rmsnorm_kernel<1>", "argmax_fold_kernel"]
    name, us, top, tp, grid = states[0]
    assert us == pytest.approx(15.5)
    assert [n for n, _ in top] == ["no_instruction", "barrier", "long_scoreboard"]
    assert top[0][1] == pytest.approx(3.2)
    assert tp == {"dram": pytest.approx(0.1), "sm": pytest.approx(1.0)} and grid == "(1, 1, 1)"
    assert states[1][2][0][0] == "long_scoreboard"


def test_cli_reads_xz_and_refuses_a_file_without_warp_states(tmp_path):
    packed = tmp_path / "wss.csv.xz"
    with lzma.open(packed, "wt") as f:
        f.write(csv_text())
    r = subprocess.run([sys.executable, REPO / "tests" / "gpu" / "warp_states.py", packed],
                       capture_output=True, text=True, timeout=60)
    assert r.returncode == 0, r.stderr
    lines = r.stdout.splitlines()
    assert lines[0].split()[:3] == ["15.50", "us", "moe_route_kernel<0>"] and "no_instruction 3.2" in lines[0]
    assert lines[-1].split()[:2] == ["23.50", "us"] and lines[-1].endswith("3 kernels")

    bare = tmp_path / "times.csv"
    bare.write_text(csv_text(with_stalls=False))
    r = subprocess.run([sys.executable, REPO / "tests" / "gpu" / "warp_states.py", bare],
                       capture_output=True, text=True, timeout=60)
    assert r.returncode == 1 and "no warp state metrics" in r.stderr
