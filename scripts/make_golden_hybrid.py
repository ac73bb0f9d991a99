#!/usr/bin/env python3
"""Builds tiny random Nemotron-H models (Mamba2 + attention + MLP / MoE layers) with transformers,
saves them as bf16 safetensors folders, and records transformers' greedy tokens and logits, in the
format of scripts/make_golden.py (tests/unit/test_golden.cpp loads every folder).

Run with the CPU torch environment:
    /work/torchenv/bin/python scripts/make_golden_hybrid.py --out tests/fixtures/golden
"""
import argparse
import os
import sys

import torch

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from make_golden import PROMPTS, VOCAB, make_case, randomize  # noqa: E402

# One prompt past three SSD chunks of 16 and one that ends exactly on a chunk edge.
HYBRID_PROMPTS = PROMPTS + [list(range(7, 7 + 32 * 13, 13)), [(i * 37 + 5) % VOCAB for i in range(53)]]

NEMO = dict(vocab_size=VOCAB, hidden_size=64, num_attention_heads=4, num_key_value_heads=2, head_dim=16,
            max_position_embeddings=256, layer_norm_epsilon=1e-5, bos_token_id=1, eos_token_id=2,
            pad_token_id=0, tie_word_embeddings=False, mamba_num_heads=8, mamba_head_dim=16,
            ssm_state_size=16, n_groups=2, conv_kernel=4, chunk_size=16, use_conv_bias=True,
            mamba_hidden_act="silu", mlp_hidden_act="relu2", intermediate_size=96,
            time_step_min=0.001, time_step_max=0.1, use_mamba_kernels=False)

CASES = {
    # Mamba2, attention (no RoPE) and relu2 MLP layers.
    "nemotron_h_dense": ("nemotron_h", dict(NEMO, layers_block_type=[
        "mamba", "attention", "mamba", "mlp", "mamba", "mlp"])),
    # MoE layers: sigmoid router with score-correction bias, 4 groups of 2 experts, best 2 groups,
    # top 3 renormalized and scaled, non-gated relu2 experts plus a shared expert.
    "nemotron_h_moe": ("nemotron_h", dict(NEMO, layers_block_type=[
        "mamba", "moe", "attention", "moe", "mamba", "mlp"],
        n_routed_experts=8, num_experts_per_tok=3, moe_intermediate_size=32,
        moe_shared_expert_intermediate_size=48, n_group=4, topk_group=2, norm_topk_prob=True,
        routed_scaling_factor=2.5)),
}


def randomize_hybrid(model, seed):
    randomize(model, seed)
    g = torch.Generator().manual_seed(seed + 7)
    with torch.no_grad():
        for name, m in model.named_modules():
            if hasattr(m, "e_score_correction_bias"):
                # Some ties of score + bias inside a group would be chance; a spread bias is not.
                m.e_score_correction_bias.copy_(0.05 * torch.randn(m.e_score_correction_bias.shape, generator=g))
            if hasattr(m, "A_log"):
                # A in [-4, -0.5]: decays that matter within a 16-row chunk.
                m.A_log.copy_(torch.log(0.5 + 3.5 * torch.rand(m.A_log.shape, generator=g)))
                m.dt_bias.copy_(torch.randn(m.dt_bias.shape, generator=g) - 1.0)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", required=True)
    ap.add_argument("--only", default="")
    args = ap.parse_args()
    torch.manual_seed(0)
    for i, (name, (model_type, kw)) in enumerate(CASES.items()):
        if args.only and name != args.only:
            continue
        make_case(args.out, name, model_type, kw, lambda m, i=i: randomize_hybrid(m, 2000 + i), HYBRID_PROMPTS)


if __name__ == "__main__":
    main()
