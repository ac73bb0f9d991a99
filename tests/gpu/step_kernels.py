"""One decode step's kernels from an Nsight Compute raw CSV (tests/gpu/step_kernels.sh).

    python3 tests/gpu/step_kernels.py NCU.csv LABEL

The step is the kernels after the next-to-last draw (sample_kernel, or argmax_fold_kernel where
every spec is greedy) up to the last one; they are summed by kernel name (template arguments
kept, namespaces dropped) and printed largest first.
"""
import collections
import csv
import sys

METRIC = "gpu__time_duration.sum"
# A step's last kernel: its draw, or the fold of a greedy-only call's argmax over many blocks.
STEP_ENDS = ("sample_kernel", "argmax_fold_kernel")


def kernel_rows(text):
    """The CSV's kernel rows with a timing (the units row and ncu's own messages dropped)."""
    lines = text.splitlines()
    head = next((i for i, line in enumerate(lines) if line.startswith('"ID"')), None)
    if head is None:
        raise ValueError("no kernel table in the ncu output")
    return [r for r in csv.DictReader(lines[head:])
            if r.get("Kernel Name") and r.get(METRIC, "").replace(",", "").isdigit()]


def short_name(name):
    # The namespaces go first: "(anonymous namespace)" holds the "(" that ends the name.
    for junk in ("void ", "tf::cuda::", "(anonymous namespace)::", "<unnamed>::", "unnamed>::"):
        name = name.replace(junk, "")
    return name.split("(")[0]


def step_rows(rows):
    """The rows of the last whole decode step: after the next-to-last draw, up to the last."""
    ends = [i for i, r in enumerate(rows) if short_name(r["Kernel Name"]).endswith(STEP_ENDS)]
    if len(ends) < 2:
        raise ValueError("fewer than two decode steps were timed (raise --tg)")
    return rows[ends[-2] + 1: ends[-1] + 1]


def last_step(rows):
    """[(name, calls, us)] of the last whole decode step, largest first, and its kernel count."""
    step = step_rows(rows)
    agg = collections.defaultdict(lambda: [0, 0.0])
    for r in step:
        e = agg[short_name(r["Kernel Name"])]
        e[0] += 1
        e[1] += float(r[METRIC].replace(",", "")) / 1000.0
    table = sorted(((n, c, us) for n, (c, us) in agg.items()), key=lambda t: -t[2])
    return table, len(step)


def main(argv):
    if len(argv) != 3:
        print(__doc__.strip().splitlines()[2].strip(), file=sys.stderr)
        return 2
    try:
        table, count = last_step(kernel_rows(open(argv[1]).read()))
    except (OSError, ValueError) as e:
        print(f"step_kernels: {e}", file=sys.stderr)
        return 1
    total = sum(us for _, _, us in table)
    print(f"{argv[2]}: one decode step, {count} kernels, {total:.1f} us of kernel time")
    for name, calls, us in table:
        print(f"  {name[:64]:<64} {calls:4d} x {us / calls:8.2f} us = {us:9.1f} us ({100 * us / total:4.1f}%)")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
