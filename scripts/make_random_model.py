#!/usr/bin/env python3
"""Writes a Hugging Face model folder with random bf16 weights in the shape of a real model,
from its published hyperparameters, for speed tests (nothing is downloaded).

    python3 scripts/make_random_model.py --shape llama3.1-8b --out /tmp/llama8b
Shapes: llama3.1-8b, llama3.2-1b, qwen3-30b-a3b, nemotron-3-nano-30b-a3b, qwen3-next-80b-a3b.
--layers N keeps the first N layers of the shape (its pattern prefix), for models that do not fit
the card whole. --sparse writes random values only into norms, embeddings and routers and leaves
every other tensor a hole of zeros in a sparse file, so a full-size model takes almost no disk
while a speed test still reads every byte (routing still varies with the token). Uses torch when
present (fast), else numpy. The folder also gets bench/synthetic_vocab.py's byte-level BPE
tokenizer of the shape's vocab_size (a tokenizer.json already there is kept), so it can be served.
"""
import argparse
import json
import os
import struct
import sys

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "bench"))
from synthetic_vocab import write_tokenizer  # noqa: E402

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
    # NVIDIA-Nemotron-3-Nano-30B-A3B: 23 Mamba2 + 23 MoE + 6 attention layers.
    "nemotron-3-nano-30b-a3b": dict(
        architectures=["NemotronHForCausalLM"], model_type="nemotron_h", hidden_size=2688,
        hybrid_override_pattern="MEMEM*EMEMEM*EMEMEM*EMEMEM*EMEMEM*EMEMEMEM*EMEMEMEME", num_hidden_layers=52,
        num_attention_heads=32, num_key_value_heads=2, head_dim=128, intermediate_size=1856,
        mamba_num_heads=64, mamba_head_dim=64, ssm_state_size=128, n_groups=8, conv_kernel=4, use_conv_bias=True,
        chunk_size=128, n_routed_experts=128, num_experts_per_tok=6, moe_intermediate_size=1856,
        moe_shared_expert_intermediate_size=3712, n_group=1, topk_group=1, routed_scaling_factor=2.5,
        norm_topk_prob=True, vocab_size=131072, max_position_embeddings=262144, layer_norm_epsilon=1e-5,
        tie_word_embeddings=False, bos_token_id=1, eos_token_id=2),
    # Qwen3-Next-80B-A3B: three Gated DeltaNet layers, then one gated attention layer, 48 in all.
    "qwen3-next-80b-a3b": dict(
        architectures=["Qwen3NextForCausalLM"], model_type="qwen3_next", hidden_size=2048, num_hidden_layers=48,
        layer_types=(["linear_attention"] * 3 + ["full_attention"]) * 12, full_attention_interval=4,
        num_attention_heads=16, num_key_value_heads=2, head_dim=256, intermediate_size=5120,
        linear_num_key_heads=16, linear_num_value_heads=32, linear_key_head_dim=128, linear_value_head_dim=128,
        linear_conv_kernel_dim=4, num_experts=512, num_experts_per_tok=10, moe_intermediate_size=512,
        shared_expert_intermediate_size=512, norm_topk_prob=True, decoder_sparse_step=1, mlp_only_layers=[],
        vocab_size=151936, max_position_embeddings=262144, rms_norm_eps=1e-6, tie_word_embeddings=False,
        partial_rotary_factor=0.25, bos_token_id=151643, eos_token_id=151645,
        rope_parameters={"rope_type": "default", "rope_theta": 10000000.0, "partial_rotary_factor": 0.25}),
}


def nemotron_h_shapes(c):
    H, V = c["hidden_size"], c["vocab_size"]
    yield "backbone.embeddings.weight", (V, H)
    yield "backbone.norm_f.weight", (H,)
    if not c["tie_word_embeddings"]:
        yield "lm_head.weight", (V, H)
    nh, hdm, N, G, K = c["mamba_num_heads"], c["mamba_head_dim"], c["ssm_state_size"], c["n_groups"], c["conv_kernel"]
    I, conv = nh * hdm, nh * hdm + 2 * G * N
    na, nkv, hd = c["num_attention_heads"], c["num_key_value_heads"], c["head_dim"]
    for i, kind in enumerate(c["hybrid_override_pattern"][: c["num_hidden_layers"]]):
        p = f"backbone.layers.{i}."
        yield p + "norm.weight", (H,)
        m = p + "mixer."
        if kind == "M":
            yield m + "in_proj.weight", (2 * I + 2 * G * N + nh, H)
            yield m + "conv1d.weight", (conv, 1, K)
            yield m + "conv1d.bias", (conv,)
            for n in ("dt_bias", "A_log", "D"):
                yield m + n, (nh,)
            yield m + "norm.weight", (I,)
            yield m + "out_proj.weight", (H, I)
        elif kind == "*":
            yield m + "q_proj.weight", (na * hd, H)
            yield m + "k_proj.weight", (nkv * hd, H)
            yield m + "v_proj.weight", (nkv * hd, H)
            yield m + "o_proj.weight", (H, na * hd)
        elif kind == "-":
            yield m + "up_proj.weight", (c["intermediate_size"], H)
            yield m + "down_proj.weight", (H, c["intermediate_size"])
        else:
            E, Im, Is = c["n_routed_experts"], c["moe_intermediate_size"], c["moe_shared_expert_intermediate_size"]
            yield m + "gate.weight", (E, H)
            yield m + "gate.e_score_correction_bias", (E,)
            for e in range(E):
                yield m + f"experts.{e}.up_proj.weight", (Im, H)
                yield m + f"experts.{e}.down_proj.weight", (H, Im)
            yield m + "shared_experts.up_proj.weight", (Is, H)
            yield m + "shared_experts.down_proj.weight", (H, Is)


def qwen3_next_shapes(c):
    H, V = c["hidden_size"], c["vocab_size"]
    yield "model.embed_tokens.weight", (V, H)
    yield "model.norm.weight", (H,)
    if not c["tie_word_embeddings"]:
        yield "lm_head.weight", (V, H)
    nk, nv, dk, dv, K = (c["linear_num_key_heads"], c["linear_num_value_heads"], c["linear_key_head_dim"],
                         c["linear_value_head_dim"], c["linear_conv_kernel_dim"])
    na, nkv, hd = c["num_attention_heads"], c["num_key_value_heads"], c["head_dim"]
    E, Im, Is = c["num_experts"], c["moe_intermediate_size"], c["shared_expert_intermediate_size"]
    for i, kind in enumerate(c["layer_types"][: c["num_hidden_layers"]]):
        p = f"model.layers.{i}."
        yield p + "input_layernorm.weight", (H,)
        yield p + "post_attention_layernorm.weight", (H,)
        if kind == "linear_attention":
            a = p + "linear_attn."
            yield a + "in_proj_qkvz.weight", (2 * nk * dk + 2 * nv * dv, H)
            yield a + "in_proj_ba.weight", (2 * nv, H)
            yield a + "conv1d.weight", (2 * nk * dk + nv * dv, 1, K)
            yield a + "dt_bias", (nv,)
            yield a + "A_log", (nv,)
            yield a + "norm.weight", (dv,)
            yield a + "out_proj.weight", (H, nv * dv)
        else:
            a = p + "self_attn."
            yield a + "q_proj.weight", (2 * na * hd, H)
            yield a + "k_proj.weight", (nkv * hd, H)
            yield a + "v_proj.weight", (nkv * hd, H)
            yield a + "o_proj.weight", (H, na * hd)
            yield a + "q_norm.weight", (hd,)
            yield a + "k_norm.weight", (hd,)
        m = p + "mlp."
        yield m + "gate.weight", (E, H)
        for e in range(E):
            for n in ("gate_proj", "up_proj"):
                yield m + f"experts.{e}.{n}.weight", (Im, H)
            yield m + f"experts.{e}.down_proj.weight", (H, Im)
        for n in ("gate_proj", "up_proj"):
            yield m + f"shared_expert.{n}.weight", (Is, H)
        yield m + "shared_expert.down_proj.weight", (H, Is)
        yield m + "shared_expert_gate.weight", (1, H)


def tensor_shapes(c):
    if c["model_type"] == "nemotron_h":
        yield from nemotron_h_shapes(c)
        return
    if c["model_type"] == "qwen3_next":
        yield from qwen3_next_shapes(c)
        return
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
    ap.add_argument("--layers", type=int, default=0, help="keep only the first N layers")
    ap.add_argument("--sparse", action="store_true", help="zero holes for all but norms, embeddings and routers")
    args = ap.parse_args()
    cfg = dict(SHAPES[args.shape])
    if args.layers:
        if not 0 < args.layers <= cfg["num_hidden_layers"]:
            ap.error(f"--layers must be in 1..{cfg['num_hidden_layers']}")
        cfg["num_hidden_layers"] = args.layers
        if "hybrid_override_pattern" in cfg:
            cfg["hybrid_override_pattern"] = cfg["hybrid_override_pattern"][: args.layers]
        if "layer_types" in cfg:
            cfg["layer_types"] = cfg["layer_types"][: args.layers]
    os.makedirs(args.out, exist_ok=True)
    with open(os.path.join(args.out, "config.json"), "w") as f:
        json.dump(dict(cfg, torch_dtype="bfloat16"), f, indent=2)
    had_tokenizer = os.path.exists(os.path.join(args.out, "tokenizer.json"))
    write_tokenizer(args.out)
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
    def dense(name, shape):
        return (not args.sparse or len(shape) == 1 or "embed" in name or name.endswith(".gate.weight")
                or name.endswith("shared_expert_gate.weight"))

    with open(os.path.join(args.out, "model.safetensors"), "wb") as f:
        f.write(struct.pack("<Q", len(h)))
        f.write(h)
        for name, shape in shapes:
            if dense(name, shape):
                f.write(block(shape))
            else:
                f.seek(header[name]["data_offsets"][1] - header[name]["data_offsets"][0], os.SEEK_CUR)
        f.truncate(8 + len(h) + off)
    kind = "sparse " if args.sparse else ""
    tok = "its own tokenizer.json kept" if had_tokenizer else "synthetic tokenizer"
    print(f"{args.shape}: {len(shapes)} tensors, {off / 1e9:.2f} GB {kind}in {args.out}, {tok}")


if __name__ == "__main__":
    main()
