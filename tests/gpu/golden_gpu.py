#!/usr/bin/env python3
"""GPU against transformers and against the CPU on the golden fixtures: greedy tokens from
`tensorfold run --device cuda` and `--device cpu`, compared up to the reference's first step
whose top-2 margin is below 1e-3. Run on a machine with a GPU:
    python3 tests/gpu/golden_gpu.py build-gpu/tensorfold [FIXTURE_PREFIX ...]
MATMUL_INPUT=bf16 runs both devices with --matmul-input bf16; the reference stays transformers' f32.
"""
import json
import os
import subprocess
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
MATMUL_INPUT = os.environ.get("MATMUL_INPUT", "f32")


def greedy(binary, model, device, prompt, n):
    out = subprocess.run([binary, "run", "--model", model, "--device", device, "--matmul-input", MATMUL_INPUT,
                          "--prompt-ids",
                          ",".join(map(str, prompt)), "--ids", "--temperature", "0", "--max-tokens", str(n)],
                         capture_output=True, text=True, timeout=300)
    if out.returncode != 0:
        raise RuntimeError(out.stderr)
    return [int(t) for t in out.stdout.strip().split(",")]


def main():
    binary = sys.argv[1]
    prefixes = sys.argv[2:]
    gdir = os.path.join(ROOT, "tests", "fixtures", "golden")
    unequal_ref = unequal_cpu = compared = 0
    for name in sorted(os.listdir(gdir)):
        if prefixes and not any(name.startswith(p) for p in prefixes):
            continue
        model = os.path.join(gdir, name)
        expected = json.load(open(os.path.join(model, "expected.json")))
        for case in expected["cases"]:
            gpu = greedy(binary, model, "cuda", case["prompt"], len(case["tokens"]))
            cpu = greedy(binary, model, "cpu", case["prompt"], len(case["tokens"]))
            for step, ref in enumerate(case["tokens"]):
                compared += 1
                bad_ref, bad_cpu = gpu[step] != ref, gpu[step] != cpu[step]
                unequal_ref += bad_ref
                unequal_cpu += bad_cpu
                if bad_ref or bad_cpu or case["steps"][step]["margin"] < 1e-3:
                    if bad_ref or bad_cpu:
                        print(f"{name} prompt {len(case['prompt'])}: step {step} gpu {gpu[step]} cpu {cpu[step]} "
                              f"ref {ref} margin {case['steps'][step]['margin']:.2e}")
                    break
    print(f"golden on GPU (matmul input {MATMUL_INPUT}): {compared} steps compared, {unequal_ref} unequal to transformers, {unequal_cpu} unequal to CPU")
    return 1 if unequal_ref or unequal_cpu else 0


if __name__ == "__main__":
    sys.exit(main())
