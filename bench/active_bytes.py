#!/usr/bin/env python3
"""Bytes a model reads per decoded token and what one lane costs in memory, from its folder.

    python3 bench/active_bytes.py MODEL_DIR [--bandwidth 4.27e12]

Active bytes: every weight except routed experts, plus top-k routed experts per MoE layer (the
embedding table counts one row). The decode bound at batch 1 is bandwidth / active bytes.
Per lane: recurrent state (two f32 slots: the state and the pending forward) and f32 KV per token.
"""
import argparse
import json
import os
import re
import struct


def tensors(folder):
    out = {}
    for name in sorted(os.listdir(folder)):
        if not name.endswith(".safetensors"):
            continue
        with open(os.path.join(folder, name), "rb") as f:
            n = struct.unpack("<Q", f.read(8))[0]
            header = json.loads(f.read(n))
        for k, v in header.items():
            if k == "__metadata__":
                continue
            out[k] = v["data_offsets"][1] - v["data_offsets"][0]
    return out


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("model")
    ap.add_argument("--bandwidth", type=float, default=4.27e12, help="bytes/s (copy bandwidth of the card)")
    args = ap.parse_args()
    cfg = json.load(open(os.path.join(args.model, "config.json")))
    t = tensors(args.model)
    experts = cfg.get("n_routed_experts") or cfg.get("num_experts") or 0
    top_k = cfg.get("num_experts_per_tok", 0)
    total = sum(t.values())
    routed = sum(v for k, v in t.items() if re.search(r"\.experts\.\d+\.", k))
    embed = sum(v for k, v in t.items() if "embed" in k)
    vocab = cfg["vocab_size"]
    active = total - routed - embed + embed // vocab + (routed * top_k // experts if experts else 0)
    # Recurrent state per sequence and KV per token.
    mt = cfg.get("model_type")
    state = kv_layers = 0
    if mt == "nemotron_h":
        pattern = cfg.get("hybrid_override_pattern") or "".join(
            {"mamba": "M", "linear_attention": "M", "attention": "*", "full_attention": "*", "mlp": "-",
             "moe": "E"}[x] for x in cfg["layers_block_type"])
        pattern = pattern[: cfg.get("num_hidden_layers", len(pattern))]
        cfg.setdefault("num_hidden_layers", len(pattern))
        conv = cfg["mamba_num_heads"] * cfg["mamba_head_dim"] + 2 * cfg["n_groups"] * cfg["ssm_state_size"]
        per = (cfg["conv_kernel"] - 1) * conv + cfg["mamba_num_heads"] * cfg["mamba_head_dim"] * cfg["ssm_state_size"]
        state = pattern.count("M") * per
        kv_layers = pattern.count("*")
    elif mt in ("qwen3_next", "qwen3_5_text", "qwen3_5_moe_text"):
        types = cfg["layer_types"][: cfg["num_hidden_layers"]]
        nk, nv = cfg["linear_num_key_heads"], cfg["linear_num_value_heads"]
        dk, dv = cfg["linear_key_head_dim"], cfg["linear_value_head_dim"]
        per = (cfg["linear_conv_kernel_dim"] - 1) * (2 * nk * dk + nv * dv) + nv * dk * dv
        state = types.count("linear_attention") * per
        kv_layers = types.count("full_attention")
    else:
        kv_layers = cfg["num_hidden_layers"]
    hd = cfg.get("head_dim") or cfg["hidden_size"] // cfg["num_attention_heads"]
    kv_token = 2 * kv_layers * cfg["num_key_value_heads"] * hd * 4
    print(json.dumps({
        "model": args.model, "layers": cfg["num_hidden_layers"], "total_bytes": total, "active_bytes": active,
        "decode_bound_tps": args.bandwidth / active, "state_bytes_per_lane": 2 * state * 4,
        "kv_bytes_per_token": kv_token}))


if __name__ == "__main__":
    main()
