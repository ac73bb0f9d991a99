#!/usr/bin/env python3
"""One line per run of tests/gpu/run_ab.sh logs: label, batch, pp, tg, depth, pp and tg tok/s, and the
share of the decode the host spent waiting on the device.

    python3 tests/gpu/abparse.py gpu-out/ab_llama3.1-8b.txt ...
"""
import json
import sys


def rows(path):
    for line in open(path, encoding="utf-8", errors="replace"):
        label, sep, rest = line.partition(" {")
        if not sep:
            continue
        try:
            d = json.loads("{" + rest)
        except json.JSONDecodeError:
            continue
        yield label, d


def main(paths):
    for p in paths:
        print("==", p)
        for label, d in rows(p):
            print(f"{label:14s} b{d['batch']:<3d} pp{d['pp']:<5d} tg{d['tg']:<4d} depth{d.get('depth', 0):<5d} "
                  f"pp {d['pp_tps']:10.1f} tg {d['tg_tps']:9.1f} wait {d.get('tg_device_wait', '-')}")


if __name__ == "__main__":
    main(sys.argv[1:])
