#!/usr/bin/env python3
"""Writes a Hugging Face model folder with random bf16 weights in the shape of a real model,
from its published hyperparameters, for speed tests (nothing is downloaded).

    python3 scripts/make_random_model.py --shape llama3.1-8b --out /tmp/llama8b
Shapes: llama3.1-8b, llama3.2-1b, qwen3-30b-a3b. Uses torch when present (fast), else numpy.
"""
import argparse
import json
import os
import struct

SHAPES = {
    "llama3.1-8b": dict(architectures=["LlamaForCausalLM"], model_type="llama", hidden_size=4096,
                        intermediate_size=14336, num_hidden_layers=32, num_attention_heads=32,
                        num_key_value_heads=8, vocab_size=128256, max_position_embeddings=131072,
                        rms_norm_eps=1e-5, tie_word_embeddings=False, bos_token_id=128000, eos_token_id=128001,
                        rope_parameters={"rope_type": "llama3", "rope_theta": 500000.0, "factor": 8.0,
                                         "low_freq_factor": 1.0, "high_freq_factor": 4.0,
                                         "original_max_position_embeddings": 8192}),
    "llama3.2-1b": dict(architectures=["LlamaForCausalLM"], model_type="llama", hidden_size=2048,
                        intermediate_size=8192, num_hidden_layers=16, num_attention_heads=32,
                        num_key_value_heads=8, head_dim=64, vocab_size=128256, max_position_embeddings=131072,
                        rms_norm_eps=1e-5, tie_word_embeddings=True, bos_token_id=128000, eos_token_id=128001,
                        rope_parameters={"rope_type": "llama3", "rope_theta": 500000.0, "factor": 32.0,
                                         "low_freq_factor": 1.0, "high_freq_factor": 4.0,
                                         "original_max_position_embeddings": 8192}),
    "qwen3-30b-a3b": dict(architectures=["Qwen3MoeForCausalLM"], model_type="qwen3_moe", hidden_size=2048,
                          intermediate_size=6144, moe_intermediate_size=768, num_hidden_layers=48,
                          num_attention_heads=32, num_key_value_heads=4, head_dim=128, num_experts=128,
                          num_experts_per_tok=8, norm_topk_prob=True, decoder_sparse_step=1, mlp_only_layers=[],
                          vocab_size=151936, max_position_embeddings=40960, rms_norm_eps=1e-6,
                          tie_word_embeddings=False, bos_token_id=151643, eos_token_id=151645,
                          rope_parameters={"rope_type": "default", "rope_theta": 1000000.0}),
}


def tensor_shapes(c):
    H, L = c["hidden_size"], c["num_hidden_layers"]
    nh, nkv = c["num_attention_heads"], c["num_key_value_heads"]
    hd = c.get("head_dim", H // nh)
    yield "model.embed_tokens.weight", (c["vocab_size"], H)
    yield "model.norm.weight", (H,)
    if not c["tie_word_embeddings"]:
        yield "lm_head.weight", (c["vocab_size"], H)
    for i in range(L):
        p = f"model.layers.{i}."
        yield p + "input_layernorm.weight", (H,)
        yield p + "post_attention_layernorm.weight", (H,)
        yield p + "self_attn.q_proj.weight", (nh * hd, H)
        yield p + "self_attn.k_proj.weight", (nkv * hd, H)
        yield p + "self_attn.v_proj.weight", (nkv * hd, H)
        yield p + "self_attn.o_proj.weight", (H, nh * hd)
        if c["model_type"] == "qwen3_moe":
            yield p + "self_attn.q_norm.weight", (hd,)
            yield p + "self_attn.k_norm.weight", (hd,)
            E, I = c["num_experts"], c["moe_intermediate_size"]
            yield p + "mlp.gate.weight", (E, H)
            for e in range(E):
                yield p + f"mlp.experts.{e}.gate_proj.weight", (I, H)
                yield p + f"mlp.experts.{e}.up_proj.weight", (I, H)
                yield p + f"mlp.experts.{e}.down_proj.weight", (H, I)
        else:
            I = c["intermediate_size"]
            yield p + "mlp.gate_proj.weight", (I, H)
            yield p + "mlp.up_proj.weight", (I, H)
            yield p + "mlp.down_proj.weight", (H, I)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--shape", required=True, choices=sorted(SHAPES))
    ap.add_argument("--out", required=True)
    ap.add_argument("--seed", type=int, default=0)
    args = ap.parse_args()
    cfg = SHAPES[args.shape]
    os.makedirs(args.out, exist_ok=True)
    with open(os.path.join(args.out, "config.json"), "w") as f:
        json.dump(dict(cfg, torch_dtype="bfloat16"), f, indent=2)
    shapes = list(tensor_shapes(cfg))
    header, off = {}, 0
    for name, shape in shapes:
        n = 1
        for d in shape:
            n *= d
        header[name] = {"dtype": "BF16", "shape": list(shape), "data_offsets": [off, off + 2 * n]}
        off += 2 * n
    h = json.dumps(header, separators=(",", ":")).encode()
    h += b" " * ((8 - len(h) % 8) % 8)
    try:
        import torch
        gen = torch.Generator(device="cuda" if torch.cuda.is_available() else "cpu").manual_seed(args.seed)
        dev = gen.device

        def block(shape):
            if len(shape) == 1:
                return torch.ones(shape, dtype=torch.bfloat16).view(torch.int16).numpy().tobytes()
            t = torch.randn(shape, generator=gen, device=dev, dtype=torch.float32) * (shape[-1] ** -0.5)
            return t.to(torch.bfloat16).view(torch.int16).cpu().numpy().tobytes()
    except ImportError:
        import numpy as np
        rng = np.random.default_rng(args.seed)

        def block(shape):
            if len(shape) == 1:
                return np.full(shape, 0x3F80, dtype=np.uint16).tobytes()
            u = (rng.standard_normal(shape, dtype=np.float32) * shape[-1] ** -0.5).view(np.uint32)
            return ((u + 0x7FFF + ((u >> 16) & 1)) >> 16).astype(np.uint16).tobytes()
    with open(os.path.join(args.out, "model.safetensors"), "wb") as f:
        f.write(struct.pack("<Q", len(h)))
        f.write(h)
        for name, shape in shapes:
            f.write(block(shape))
    print(f"{args.shape}: {len(shapes)} tensors, {off / 1e9:.2f} GB in {args.out}")


if __name__ == "__main__":
    main()
