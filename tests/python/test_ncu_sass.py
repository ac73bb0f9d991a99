"""tests/gpu/ncu_sass.py: Nsight Compute's source page (SASS with stall samples) summed by stall
reason and opcode, first launch only."""
import csv
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO / "tests" / "gpu"))
import ncu_sass  # noqa: E402

HEAD = ('"Address","Source","Warp Stall Sampling (All Samples)","Warp Stall Sampling (Not-issued Samples)",'
        '"# Samples","Instructions Executed","stall_barrier","stall_wait","stall_barrier (Not Issued)"')


def table(kernel, rows):
    out = [f'"Kernel Name","{kernel}",', HEAD]
    out += [f'"0x7f00{a:04x}","{sass}","{s}","0","{s}","{e}","{b}","{w}","0"' for a, sass, s, e, b, w in rows]
    return out


FIRST = [(0x10, "      HMMA.16816.F32.BF16 R20, R24, R20, RZ", 6, 40, 0, 6),
         (0x20, "@P1   BRA 0x7f000010", 10, 40, 9, 1),
         (0x30, "@!PT  LDS RZ, [RZ]", 0, 80, 0, 0),
         (0x40, "      BAR.SYNC.DEFER_BLOCKING 0x0", 4, 40, 4, 0)]
SECOND = [(0x10, "      FADD R1, R2, R3", 99, 999, 0, 99)]


def csv_rows(text):
    return list(csv.reader(text.splitlines()))


def test_first_launch_by_stall_and_opcode():
    text = "\n".join(table("flash_decode", FIRST) + table("other", SECOND)) + "\n"
    by_stall, op_exec, op_samp, recs = ncu_sass.first_launch(csv_rows(text))
    assert dict(by_stall) == {"stall_barrier": 13, "stall_wait": 7}  # the second launch is not read
    assert op_exec == {"HMMA": 40, "BRA": 40, "LDS": 80, "BAR": 40}
    assert op_samp["BRA"] == 10 and op_samp["FADD"] == 0
    assert max(recs)[3].startswith("@P1   BRA")
    assert ncu_sass.opcode("@!UP0 ULDC.64 UR4, c[0x0][0x118]") == "ULDC"
    # Cut at the BAR.SYNC: the code before it, then the barrier and what follows.
    assert ncu_sass.barrier_regions(recs) == [(None, 16, 3), ("0x7f000040", 4, 1)]


def test_cli_prints_and_refuses_what_it_cannot_read(tmp_path):
    good = tmp_path / "sass.csv"
    good.write_text("\n".join(table("k", FIRST)) + "\n")
    r = subprocess.run([sys.executable, REPO / "tests" / "gpu" / "ncu_sass.py", good, "2"],
                       capture_output=True, text=True, timeout=60)
    assert r.returncode == 0, r.stderr
    lines = r.stdout.splitlines()
    assert lines[0] == "20 stall samples, 200 warp instructions executed"
    assert lines[1].split() == ["stall_barrier", "65.0%"]
    at = lines.index("samples between barriers (2% or more): opening barrier, samples %, instructions")
    assert lines[at - 2].split()[:2] == ["10", "40"] and "BRA" in lines[at - 2]
    assert [line.split() for line in lines[at + 1:]] == [["start", "80.0", "3"], ["000040", "20.0", "1"]]
    bad = tmp_path / "raw.csv"
    bad.write_text('"ID","Kernel Name"\n"1","k"\n')
    r = subprocess.run([sys.executable, REPO / "tests" / "gpu" / "ncu_sass.py", bad],
                       capture_output=True, text=True, timeout=60)
    assert r.returncode != 0 and "no source table" in r.stderr
