#!/usr/bin/env python3
"""Compares the held-out loss curves of two training runs of the same config (curve.json files
written by train.py): the loss at every step both evaluated, and at each run's best step.

    python3 scripts/train/compare_curves.py models/default/curve.json RERUN/curve.json
"""
import json
import sys


def main():
    a, b = (json.load(open(p)) for p in sys.argv[1:3])
    pa = {p["step"]: p["val_loss"] for p in a["points"]}
    pb = {p["step"]: p["val_loss"] for p in b["points"]}
    common = sorted(set(pa) & set(pb))
    worst = 0.0
    for s in common:
        d = (pb[s] - pa[s]) / pa[s]
        worst = max(worst, abs(d)) if s > 0 else worst
        print(f"step {s:6d}  {pa[s]:.4f}  {pb[s]:.4f}  {100 * d:+.2f}%")
    ba, bb = a["best"]["val_loss"], b["best"]["val_loss"]
    print(json.dumps({"steps_compared": len(common), "max_rel_diff_after_step_0": worst,
                      "best_a": ba, "best_b": bb, "best_rel_diff": (bb - ba) / ba,
                      "best_step_a": a["best"]["step"], "best_step_b": b["best"]["step"]}))


if __name__ == "__main__":
    main()
