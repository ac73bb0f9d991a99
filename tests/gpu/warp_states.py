"""Where each kernel of one decode step stalls, from Nsight Compute's warp state section.

    python3 tests/gpu/warp_states.py NCU.csv[.xz]

NCU.csv: `ncu --section WarpStateStats --section LaunchStats --section SpeedOfLight --csv --page raw`
over a short `tensorfold bench` (tests/gpu/run_small_stalls.sh writes two). Prints the last whole
step (step_kernels.py's rule) kernel by kernel in launch order: time, the four largest stall
reasons (warps stalled there per issue), DRAM and SM throughput as a share of peak, and the grid.
"""
import csv
import lzma
import re
import sys

import step_kernels

STALL = re.compile(r"smsp__average_warps_issue_stalled_(\w+)_per_issue_active\.ratio")
THROUGHPUT = {"dram": "dram__throughput.avg.pct_of_peak_sustained_elapsed",
              "sm": "sm__throughput.avg.pct_of_peak_sustained_elapsed"}


def number(v):
    try:
        return float(str(v).replace(",", ""))
    except ValueError:
        return 0.0


def step_states(rows):
    """[(name, us, [(stall, warps per issue)] largest first, {dram|sm: % of peak}, grid)] of the
    last whole step, in launch order."""
    step = step_kernels.step_rows(rows)
    stalls = {m.group(1): c for c in step[0] for m in [STALL.fullmatch(c)] if m}
    if not stalls:
        raise ValueError("no warp state metrics in the file (profile with --section WarpStateStats)")
    out = []
    for r in step:
        top = sorted(((name, number(r[c])) for name, c in stalls.items()), key=lambda t: -t[1])
        out.append((step_kernels.short_name(r["Kernel Name"]), number(r[step_kernels.METRIC]) / 1000.0, top,
                    {k: number(r.get(c, 0)) for k, c in THROUGHPUT.items()}, r.get("Grid Size", "?")))
    return out


def main(argv):
    if len(argv) != 2:
        sys.exit(__doc__)
    opener = lzma.open if argv[1].endswith(".xz") else open
    try:
        with opener(argv[1], "rt") as f:
            states = step_states(step_kernels.kernel_rows(f.read()))
    except (OSError, ValueError) as e:
        sys.exit(f"warp_states: {e}")
    for name, us, top, tp, grid in states:
        print(f"{us:8.2f} us  {name[:52]:52s} " + " ".join(f"{n} {v:.1f}" for n, v in top[:4])
              + " | " + " ".join(f"{k} {v:.0f}%" for k, v in tp.items()) + f" | grid {grid}")
    print(f"{sum(s[1] for s in states):8.2f} us  the step, {len(states)} kernels")


if __name__ == "__main__":
    main(sys.argv)
