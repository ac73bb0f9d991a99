#!/usr/bin/env python3
"""Golden fixtures for the hybrid Gated DeltaNet families (Qwen3-Next, Qwen3.5 text, Qwen3.5-MoE text):
tiny random bf16 models whose greedy tokens and logits transformers computes in float32 on CPU.

    /work/torchenv/bin/python scripts/make_golden_qwen3_next.py --out tests/fixtures/golden

Same folder format as scripts/make_golden.py (whose helpers it reuses). transformers' chunked delta rule
uses a fixed chunk of 64, so one prompt is longer than 64 tokens to cross a chunk seam.
"""
import argparse
import os
import sys

import torch

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from make_golden import PROMPTS, make_case, randomize  # noqa: E402

VOCAB = 512
LONG_PROMPT = [3 + (7 + 13 * i) % 509 for i in range(80)]
ALL_PROMPTS = PROMPTS + [LONG_PROMPT]

BASE = dict(vocab_size=VOCAB, hidden_size=64, intermediate_size=96, num_hidden_layers=4,
            num_attention_heads=4, num_key_value_heads=2, head_dim=16, max_position_embeddings=256,
            rms_norm_eps=1e-6, bos_token_id=1, eos_token_id=2, pad_token_id=0,
            linear_conv_kernel_dim=4, linear_key_head_dim=16, linear_value_head_dim=32,
            linear_num_key_heads=2, linear_num_value_heads=4, tie_word_embeddings=False)

CASES = {
    # MoE with a sigmoid-gated shared expert (layer 2 dense), partial rotary, 1 full-attention layer.
    "qwen3_next": ("qwen3_next", dict(
        BASE, layer_types=["linear_attention", "full_attention", "linear_attention", "linear_attention"],
        num_experts=8, num_experts_per_tok=2, moe_intermediate_size=32, shared_expert_intermediate_size=48,
        norm_topk_prob=True, decoder_sparse_step=1, mlp_only_layers=[2],
        rope_parameters={"rope_type": "default", "rope_theta": 10000.0, "partial_rotary_factor": 0.5})),
    # Dense, separate in_proj_{qkv,z,b,a}, interleaved mrope sections (text positions: plain rope).
    "qwen3_5_text": ("qwen3_5_text", dict(
        BASE, full_attention_interval=2, tie_word_embeddings=True,
        rope_parameters={"rope_type": "default", "rope_theta": 10000.0, "partial_rotary_factor": 0.5,
                         "mrope_section": [2, 1, 1], "mrope_interleaved": True})),
    # Every layer sparse, top-k always renormalized, shared expert.
    "qwen3_5_moe_text": ("qwen3_5_moe_text", dict(
        BASE, full_attention_interval=4, num_experts=6, num_experts_per_tok=2, moe_intermediate_size=32,
        shared_expert_intermediate_size=48,
        rope_parameters={"rope_type": "default", "rope_theta": 10000.0, "partial_rotary_factor": 0.25,
                         "mrope_section": [1, 1, 0], "mrope_interleaved": True})),
}


def tune(model, seed):
    """Zero-centred norms near 1 + 0 and decays that keep a long memory, so old tokens still matter."""
    g = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for name, p in model.named_parameters():
            if name.endswith(("layernorm.weight", "model.norm.weight", "q_norm.weight", "k_norm.weight")):
                p.copy_(0.2 * torch.randn(p.shape, generator=g))
            elif name.endswith("A_log"):
                p.copy_(torch.empty(p.shape).uniform_(0.05, 1.0, generator=g).log())
            elif name.endswith("dt_bias"):
                p.copy_(0.3 * torch.randn(p.shape, generator=g))


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", required=True)
    ap.add_argument("--only", default="")
    args = ap.parse_args()
    torch.manual_seed(0)
    for i, (name, (model_type, kw)) in enumerate(CASES.items()):
        if args.only and name != args.only:
            continue
        def prepare(model, i=i):
            randomize(model, 2000 + i)
            tune(model, 3000 + i)
        make_case(args.out, name, model_type, kw, prepare, ALL_PROMPTS)


if __name__ == "__main__":
    main()
