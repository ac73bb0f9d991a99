#!/usr/bin/env python3
"""Trains one small causal LM (Llama or Nemotron-H hybrid) on the token ids from prepare_corpus.py
and exports it as a Hugging Face folder (bf16 safetensors) with the tokenizer and a curve JSON.

    python3 scripts/train/train.py --config scripts/train/configs/default.json --out models/default

The run is fixed by the config and --seed, except the step count: it is the config's max_steps,
lowered when the measured speed says the wall-clock budget (--time-budget) cannot hold them. The
chosen count is written to curve.json; --max-steps N repeats a run with that count.
"""
import argparse
import json
import math
import os
import shutil
import time

import numpy as np
import torch
import torch.nn.functional as F

HERE = os.path.dirname(os.path.abspath(__file__))
TOKENIZER_FILES = ("tokenizer.json", "tokenizer_config.json")


def build_model(arch, model_cfg, meta):
    common = dict(vocab_size=meta["vocab_size"], bos_token_id=meta["special_ids"]["bos"],
                  eos_token_id=meta["special_ids"]["eos"], pad_token_id=meta["special_ids"]["eos"])
    if arch == "llama":
        from transformers import LlamaConfig, LlamaForCausalLM
        cfg = LlamaConfig(**common, **model_cfg)
        return LlamaForCausalLM(cfg)
    if arch == "nemotron_h":
        from transformers import NemotronHConfig, NemotronHForCausalLM
        cfg = NemotronHConfig(**common, **model_cfg)
        return NemotronHForCausalLM(cfg)
    raise SystemExit(f"--arch: unknown architecture {arch!r} (llama or nemotron_h)")


def lr_at(step, total, t):
    if step < t["warmup_steps"]:
        return t["lr"] * (step + 1) / t["warmup_steps"]
    frac = min(1.0, (step - t["warmup_steps"]) / max(1, total - t["warmup_steps"]))
    floor = t["lr"] * t["min_lr_ratio"]
    return floor + (t["lr"] - floor) * 0.5 * (1 + math.cos(math.pi * frac))


def loss_of(model, x, y, dtype):
    with torch.autocast(device_type=x.device.type, dtype=dtype, enabled=dtype != torch.float32):
        logits = model(input_ids=x).logits
    return F.cross_entropy(logits.float().reshape(-1, logits.shape[-1]), y.reshape(-1))


@torch.no_grad()
def evaluate(model, val, seq_len, batch, dtype, max_windows):
    model.eval()
    n = min(max_windows, (val.numel() - 1) // seq_len)
    total, count = 0.0, 0
    for i in range(0, n, batch):
        idx = torch.arange(i, min(n, i + batch), device=val.device) * seq_len
        offs = torch.arange(seq_len + 1, device=val.device)
        w = val[idx[:, None] + offs[None, :]]
        loss = loss_of(model, w[:, :-1], w[:, 1:], dtype)
        total += loss.item() * w.shape[0] * seq_len
        count += w.shape[0] * seq_len
    model.train()
    return total / count


def add_legacy_layer_fields(path, config):
    # Older readers of nemotron_h configs take the layer count and the pattern string, not the list.
    cfg = json.load(open(path))
    cfg["num_hidden_layers"] = len(config.layers_block_type)
    cfg["hybrid_override_pattern"] = config.hybrid_override_pattern
    json.dump(cfg, open(path, "w"), indent=2, sort_keys=True)


def export(model, best_state, out, data, meta, arch, curve, extra_files):
    model.load_state_dict(best_state)
    model = model.to(torch.bfloat16)
    os.makedirs(out, exist_ok=True)
    model.save_pretrained(out, safe_serialization=True)
    if arch == "nemotron_h":
        add_legacy_layer_fields(os.path.join(out, "config.json"), model.config)
    for f in TOKENIZER_FILES:
        shutil.copy(os.path.join(data, f), os.path.join(out, f))
    sp = meta["special_ids"]
    gen = {"bos_token_id": sp["bos"], "eos_token_id": [sp["eos"], sp["im_end"]], "do_sample": True,
           "temperature": 0.8, "top_p": 0.95}
    json.dump(gen, open(os.path.join(out, "generation_config.json"), "w"), indent=2)
    json.dump(curve, open(os.path.join(out, "curve.json"), "w"), indent=1)
    for f in extra_files:
        shutil.copy(f, out)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--config", required=True, help="JSON: {arch, model: {...}, train: {...}}")
    ap.add_argument("--arch", choices=["llama", "nemotron_h"], help="must match the config's arch if given")
    ap.add_argument("--data", default=os.path.join(HERE, "data"))
    ap.add_argument("--out", required=True)
    ap.add_argument("--time-budget", type=float, default=420.0, help="seconds for the whole run, export included")
    ap.add_argument("--max-steps", type=int, help="overrides the config's max_steps")
    ap.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    ap.add_argument("--seed", type=int, default=1234)
    a = ap.parse_args()
    t0 = time.time()
    spec = json.load(open(a.config))
    arch, t = spec["arch"], dict(spec["train"])
    if a.arch and a.arch != arch:
        raise SystemExit(f"--arch {a.arch} does not match {a.config}'s arch {arch}")
    if a.max_steps:
        t["max_steps"] = a.max_steps
    meta = json.load(open(os.path.join(a.data, "meta.json")))
    torch.manual_seed(a.seed)
    dev = torch.device(a.device)
    dtype = torch.bfloat16 if dev.type == "cuda" else torch.float32
    if dev.type == "cuda":
        torch.backends.cuda.matmul.allow_tf32 = True

    train = torch.from_numpy(np.load(os.path.join(a.data, "train.npy")).astype(np.int64)).to(dev)
    val = torch.from_numpy(np.load(os.path.join(a.data, "val.npy")).astype(np.int64)).to(dev)
    model = build_model(arch, spec["model"], meta).to(dev)
    n_params = sum(p.numel() for p in model.parameters())
    print(f"[{arch}] {n_params/1e6:.2f}M parameters, {train.numel()} train tokens, {val.numel()} val tokens",
          flush=True)
    decay = [p for n, p in model.named_parameters() if p.dim() >= 2]
    no_decay = [p for n, p in model.named_parameters() if p.dim() < 2]
    opt = torch.optim.AdamW([{"params": decay, "weight_decay": t["weight_decay"]},
                             {"params": no_decay, "weight_decay": 0.0}],
                            lr=t["lr"], betas=tuple(t["betas"]), eps=1e-8, fused=dev.type == "cuda")
    L, B = t["seq_len"], t["batch_size"]
    gen = torch.Generator(device=dev)
    gen.manual_seed(a.seed)
    offs = torch.arange(L + 1, device=dev)

    total = t["max_steps"]
    points, best, best_state, bad, stop_reason = [], float("inf"), None, 0, "max_steps"
    tokens, step, timing_start = 0, 0, None
    reserve = t.get("reserve_s", 30.0)
    while step < total:
        if step == t["timing_from"]:
            if dev.type == "cuda":
                torch.cuda.synchronize()
            timing_start = time.time()
        if step == t["timing_from"] + t["timing_steps"] and timing_start is not None:
            if dev.type == "cuda":
                torch.cuda.synchronize()
            per_step = (time.time() - timing_start) / t["timing_steps"] * (1 + t.get("eval_overhead", 0.1))
            fit = int(step + (a.time_budget - reserve - (time.time() - t0)) / per_step)
            if fit < total:
                print(f"[{arch}] time budget holds {fit} steps, not {total}", flush=True)
                total = max(step + 1, fit)
        if step % t["eval_every"] == 0 or step == total - 1:
            vl = evaluate(model, val, L, t["eval_batch"], dtype, t.get("eval_windows", 10**9))
            points.append({"step": step, "tokens": tokens, "val_loss": vl, "time_s": round(time.time() - t0, 1)})
            print(f"[{arch}] step {step} tokens {tokens} val_loss {vl:.4f} ppl {math.exp(vl):.2f} "
                  f"t {time.time() - t0:.0f}s", flush=True)
            if vl < best - t["min_delta"]:
                best, bad = vl, 0
                best_state = {k: v.detach().clone() for k, v in model.state_dict().items()}
            else:
                bad += 1
                if bad >= t["patience"]:
                    stop_reason = "early_stop"
                    break
        if time.time() - t0 > a.time_budget - reserve:
            stop_reason = "time_budget"
            break
        for g in opt.param_groups:
            g["lr"] = lr_at(step, total, t)
        starts = torch.randint(0, train.numel() - L - 1, (B,), device=dev, generator=gen)
        w = train[starts[:, None] + offs[None, :]]
        loss = loss_of(model, w[:, :-1], w[:, 1:], dtype)
        opt.zero_grad(set_to_none=True)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), t["grad_clip"])
        opt.step()
        tokens += B * L
        step += 1
        if step % t.get("log_every", 100) == 0:
            print(f"[{arch}] step {step} train_loss {loss.item():.4f} lr {lr_at(step, total, t):.2e}", flush=True)
    best_point = min(points, key=lambda p: p["val_loss"])
    curve = {"arch": arch, "config": os.path.basename(a.config), "seed": a.seed, "parameters": n_params,
             "planned_steps": total, "steps_run": step, "stop_reason": stop_reason,
             "best": best_point, "best_val_ppl": math.exp(best_point["val_loss"]),
             "wall_s": round(time.time() - t0, 1), "device": torch.cuda.get_device_name(0) if dev.type == "cuda" else "cpu",
             "train_settings": t, "points": points}
    export(model, best_state, a.out, a.data, meta, arch, curve, [a.config])
    print(f"[{arch}] done: best val_loss {best_point['val_loss']:.4f} at step {best_point['step']}, "
          f"{stop_reason}, {time.time() - t0:.0f}s", flush=True)


if __name__ == "__main__":
    main()
