#!/usr/bin/env python3
"""Summary of Nsight Compute's source page (`ncu -i REP --page source --csv --print-source sass`):
the stall reasons over all samples, executed instructions and samples by opcode, the most
sampled instructions, and the samples between block barriers. With several launches in the report
only the first is read.
    python3 tests/gpu/ncu_sass.py ncu_sass.csv [TOP]
"""
import collections
import csv
import re
import sys

SAMPLES, EXECUTED = "Warp Stall Sampling (All Samples)", "Instructions Executed"


def opcode(sass):
    """The opcode of a SASS line without its predicate or modifiers: "@!P1 BRA 0x10" is BRA."""
    return re.sub(r"^@!?U?P\w+\s+", "", sass.strip()).split(" ")[0].split(".")[0]


def first_launch(rows):
    """The first launch's table: (stall counts, executed by opcode, samples by opcode, instructions
    as (samples, executed, address, SASS)). Raises ValueError where the table or a column is missing."""
    start = next((i for i, r in enumerate(rows) if r and r[0] == "Address"), None)
    if start is None:
        raise ValueError("no source table (is it --page source --csv?)")
    hdr = rows[start]
    ix = {h: i for i, h in enumerate(hdr)}
    missing = [h for h in ("Source", SAMPLES, EXECUTED) if h not in ix]
    if missing:
        raise ValueError(f"columns missing: {missing}")
    stalls = [h for h in hdr if h.startswith("stall_") and "(Not Issued)" not in h]
    by_stall, op_exec, op_samp, recs = collections.Counter(), collections.Counter(), collections.Counter(), []
    for r in rows[start + 1:]:
        if len(r) < len(hdr) or not r[0].startswith("0x"):
            break  # the next launch's table, or the end
        samples, executed = int(r[ix[SAMPLES]] or 0), int(r[ix[EXECUTED]] or 0)
        op = opcode(r[ix["Source"]])
        op_exec[op] += executed
        op_samp[op] += samples
        for h in stalls:
            by_stall[h] += int(r[ix[h]] or 0)
        recs.append((samples, executed, r[0], r[ix["Source"]].strip()))
    return by_stall, op_exec, op_samp, recs


def barrier_regions(recs):
    """The instructions (in address order) cut at each BAR.SYNC: (address of the barrier that opens
    the region, or None for the code before the first, samples, instructions). A warp waiting at a
    barrier is sampled on the instructions just past it, so a region's samples hold that wait."""
    regions = [[None, 0, 0]]
    for samples, _, addr, sass in recs:
        if opcode(sass) == "BAR":
            regions.append([addr, 0, 0])
        regions[-1][1] += samples
        regions[-1][2] += 1
    return [tuple(r) for r in regions]


def main():
    path, top = sys.argv[1], int(sys.argv[2]) if len(sys.argv) > 2 else 25
    try:
        by_stall, op_exec, op_samp, recs = first_launch(list(csv.reader(open(path))))
    except ValueError as e:
        sys.exit(f"{path}: {e}")
    all_samples, all_exec = max(1, sum(op_samp.values())), max(1, sum(op_exec.values()))
    print(f"{sum(op_samp.values())} stall samples, {sum(op_exec.values())} warp instructions executed")
    for h, v in by_stall.most_common(10):
        print(f"  {h:26s} {100 * v / all_samples:5.1f}%")
    print("by opcode: executed %, samples %")
    for op, v in op_exec.most_common(20):
        print(f"  {op:10s} {100 * v / all_exec:5.1f}  {100 * op_samp[op] / all_samples:5.1f}")
    print("most sampled instructions: samples, executions, address, SASS")
    for s, e, a, src in sorted(recs, reverse=True)[:top]:
        print(f"  {s:7d} {e:10d} {a[-6:]} {src[:90]}")
    print("samples between barriers (2% or more): opening barrier, samples %, instructions")
    for addr, s, n in barrier_regions(recs):
        if s >= 0.02 * all_samples:
            print(f"  {addr[-6:] if addr else 'start':>6s} {100 * s / all_samples:5.1f} {n:6d}")


if __name__ == "__main__":
    main()
