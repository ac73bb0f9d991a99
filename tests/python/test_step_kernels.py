"""tests/gpu/step_kernels.py: one decode step's kernels summed by name from Nsight Compute's raw
CSV (the form `ncu --csv --page raw` prints, messages and units row included)."""
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO / "tests" / "gpu"))
import step_kernels  # noqa: E402

HEAD = ('"ID","Process ID","Process Name","Host Name","Kernel Name","Context","Stream","Block Size",'
        '"Grid Size","Device","CC","gpu__time_duration.sum"')
UNITS = '"","","","","","","","","","","","nsecond"'


def row(i, name, ns):
    return f'"{i}","7","tensorfold","127.0.0.1","{name}","1","13","(128, 1, 1)","(512, 1, 1)","0","9.0","{ns}"'


def csv_text(kernels):
    lines = ["==PROF== Connected to process 7", HEAD, UNITS]
    lines += [row(i, n, ns) for i, (n, ns) in enumerate(kernels)]
    lines.append("==PROF== Disconnected from process 7")
    return "\n".join(lines) + "\n"


MM = "void tf::cuda::mm::<unnamed>::skinny_matmul<0, 0, 0, 1, 2, 1>(const float *, long, long)"
NORM = "void tf::cuda::<unnamed>::rmsnorm_kernel<1>(float *, const float *)"
SAMPLE = "tf::cuda::<unnamed>::sample_kernel(const float *, int)"
PREFILL = "void tf::cuda::mm::<unnamed>::wgmma_tile<64>(const float *)"

STEPS = [(PREFILL, "900,000"), (SAMPLE, "20,000"),
         (MM, "50,000"), (NORM, "4,000"), (MM, "52,000"), (SAMPLE, "18,000"),   # step 1
         (MM, "40,000"), (NORM, "3,000"), (NORM, "5,000"), (MM, "60,000"), (SAMPLE, "16,000")]  # step 2


def test_last_step_summed_by_name():
    table, count = step_kernels.last_step(step_kernels.kernel_rows(csv_text(STEPS)))
    assert count == 5
    assert [t[0] for t in table] == ["mm::skinny_matmul<0, 0, 0, 1, 2, 1>", "sample_kernel", "rmsnorm_kernel<1>"]
    assert table[0][1:] == (2, pytest.approx(100.0))   # 40 + 60 us, the thousands separators read
    assert table[1][1:] == (1, pytest.approx(16.0))
    assert table[2][1:] == (2, pytest.approx(8.0))


def test_greedy_steps_end_at_the_argmax_fold():
    fold = "void tf::cuda::<unnamed>::argmax_fold_kernel(const float *, long, const tf::SampleSpec *, int)"
    slices = "void tf::cuda::<unnamed>::argmax_slices_kernel(const float *, long)"
    greedy = [(PREFILL, "900,000"), (slices, "3,000"), (fold, "2,000"),
              (MM, "50,000"), (slices, "3,000"), (fold, "2,000"),
              (MM, "40,000"), (NORM, "3,000"), (slices, "4,000"), (fold, "1,000")]
    table, count = step_kernels.last_step(step_kernels.kernel_rows(csv_text(greedy)))
    assert count == 4
    assert dict((n, us) for n, _, us in table) == {"mm::skinny_matmul<0, 0, 0, 1, 2, 1>": pytest.approx(40.0),
                                                   "argmax_slices_kernel": pytest.approx(4.0),
                                                   "rmsnorm_kernel<1>": pytest.approx(3.0),
                                                   "argmax_fold_kernel": pytest.approx(1.0)}


def test_cli_prints_the_step_and_refuses_what_it_cannot_read(tmp_path):
    good = tmp_path / "ncu.csv"
    good.write_text(csv_text(STEPS))
    r = subprocess.run([sys.executable, REPO / "tests" / "gpu" / "step_kernels.py", good, "l8"],
                       capture_output=True, text=True, timeout=60)
    assert r.returncode == 0, r.stderr
    assert r.stdout.splitlines()[0] == "l8: one decode step, 5 kernels, 124.0 us of kernel time"
    assert "80.6%" in r.stdout.splitlines()[1]

    one = tmp_path / "one.csv"
    one.write_text(csv_text(STEPS[:3]))
    r = subprocess.run([sys.executable, REPO / "tests" / "gpu" / "step_kernels.py", one, "x"],
                       capture_output=True, text=True, timeout=60)
    assert r.returncode == 1 and "fewer than two decode steps" in r.stderr

    empty = tmp_path / "empty.csv"
    empty.write_text("==PROF== Connected to process 7\n==ERR== profiling failed\n")
    r = subprocess.run([sys.executable, REPO / "tests" / "gpu" / "step_kernels.py", empty, "x"],
                       capture_output=True, text=True, timeout=60)
    assert r.returncode == 1 and "no kernel table" in r.stderr


def test_short_names_of_either_anonymous_namespace_spelling():
    for spelled in ("<unnamed>", "(anonymous namespace)"):
        name = f"void tf::cuda::{spelled}::attention_kernel<2, 1, 0>(tf::cuda::attn::Args)"
        assert step_kernels.short_name(name) == "attention_kernel<2, 1, 0>"
