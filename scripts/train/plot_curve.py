#!/usr/bin/env python3
"""Plots held-out loss over training tokens from one or more curve.json files into a PNG.

    python3 scripts/train/plot_curve.py --out docs/training_curve.png \
        models/default/curve.json models/default/draft/curve.json models/hybrid-nemotron/curve.json
"""
import argparse
import json

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("curves", nargs="+")
    ap.add_argument("--labels", help="comma-separated, one per curve (default: the config file name)")
    ap.add_argument("--out", required=True)
    a = ap.parse_args()
    fig, ax = plt.subplots(figsize=(7, 4.2), dpi=110)
    for i, path in enumerate(a.curves):
        c = json.load(open(path))
        names = a.labels.split(",") if a.labels else []
        label = names[i] if i < len(names) else c["config"].removesuffix(".json")
        pts = [p for p in c["points"] if p["step"] > 0]
        ax.plot([p["tokens"] / 1e6 for p in pts], [p["val_loss"] for p in pts], marker=".",
                label=f"{label} ({c['parameters'] / 1e6:.1f}M, best {c['best']['val_loss']:.3f})")
        b = c["best"]
        ax.scatter([b["tokens"] / 1e6], [b["val_loss"]], s=40, zorder=3)
    ax.set_xlabel("training tokens (millions)")
    ax.set_ylabel("held-out loss (nats per token)")
    ax.set_title("Held-out loss during training (H200)")
    ax.grid(alpha=0.3)
    ax.legend()
    fig.tight_layout()
    fig.savefig(a.out)


if __name__ == "__main__":
    main()
