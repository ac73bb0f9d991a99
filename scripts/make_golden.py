#!/usr/bin/env python3
"""Builds tiny random models of each supported architecture with transformers, saves them as
bf16 safetensors folders, and records transformers' greedy tokens and logits for fixed prompts.

Run on a machine with torch and transformers (the GPU machine):
    python3 scripts/make_golden.py --out tests/fixtures/golden
The C++ golden test (tests/unit/test_golden.cpp) loads every folder it finds there.
"""
import argparse
import json
import os
import shutil

import torch
import transformers
from transformers import AutoConfig, AutoModelForCausalLM

VOCAB = 512
PROMPTS = [[1], [1, 17, 300, 42, 99, 5, 211], list(range(3, 3 + 37 * 11, 11))]
NEW_TOKENS = 24

BASE = dict(vocab_size=VOCAB, hidden_size=64, intermediate_size=96, num_hidden_layers=2,
            num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=256,
            rms_norm_eps=1e-5, bos_token_id=1, eos_token_id=2, pad_token_id=0)

CASES = {
    # GQA, untied head, default RoPE.
    "llama": ("llama", dict(BASE, tie_word_embeddings=False,
                            rope_parameters={"rope_type": "default", "rope_theta": 10000.0})),
    # llama3 frequency scaling, tied embeddings; config rewritten in the pre-v5 form.
    "llama3_tied_oldcfg": ("llama", dict(BASE, tie_word_embeddings=True, num_hidden_layers=3,
                                         rope_parameters={"rope_type": "llama3", "rope_theta": 500000.0,
                                                          "factor": 8.0, "low_freq_factor": 1.0,
                                                          "high_freq_factor": 4.0,
                                                          "original_max_position_embeddings": 64})),
    # Linear position scaling, multi-query attention.
    "llama_linear_mqa": ("llama", dict(BASE, num_key_value_heads=1, tie_word_embeddings=False,
                                       rope_parameters={"rope_type": "linear", "rope_theta": 10000.0,
                                                        "factor": 4.0})),
    # q/k norm, explicit head_dim so heads x head_dim != hidden.
    "qwen3": ("qwen3", dict(BASE, head_dim=32, tie_word_embeddings=True,
                            rope_parameters={"rope_type": "default", "rope_theta": 1000000.0})),
    # Sparse MoE: 8 experts, top 2 renormalized, layer 1 dense.
    "qwen3_moe": ("qwen3_moe", dict(BASE, head_dim=16, num_experts=8, num_experts_per_tok=2,
                                    moe_intermediate_size=32, norm_topk_prob=True,
                                    decoder_sparse_step=1, mlp_only_layers=[1],
                                    tie_word_embeddings=False,
                                    rope_parameters={"rope_type": "default", "rope_theta": 1000000.0})),
    # MoE with a sigmoid-gated shared expert, top-k not renormalized, qkv bias.
    "qwen2_moe": ("qwen2_moe", dict(BASE, num_experts=6, num_experts_per_tok=2, moe_intermediate_size=32,
                                    shared_expert_intermediate_size=48, norm_topk_prob=False,
                                    decoder_sparse_step=1, tie_word_embeddings=False,
                                    rope_parameters={"rope_type": "default", "rope_theta": 10000.0})),
}


def randomize(model, seed):
    """Weights with a spread that makes logits decisive (the default init is near-uniform)."""
    g = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for name, p in model.named_parameters():
            if p.dim() == 1:
                if name.endswith("bias"):
                    p.copy_(0.1 * torch.randn(p.shape, generator=g))
                else:
                    p.copy_(1.0 + 0.2 * torch.randn(p.shape, generator=g))
            else:
                fan_in = p.shape[-1]
                p.copy_(torch.randn(p.shape, generator=g) * (1.5 / fan_in ** 0.5))


def old_style_config(path):
    """Rewrites rope_parameters as rope_theta + rope_scaling, as transformers 4 wrote it."""
    with open(path) as f:
        cfg = json.load(f)
    rp = cfg.pop("rope_parameters")
    cfg["rope_theta"] = rp.pop("rope_theta")
    if rp.get("rope_type", "default") != "default":
        rp["type"] = rp.pop("rope_type")
        cfg["rope_scaling"] = rp
    with open(path, "w") as f:
        json.dump(cfg, f, indent=2)


def record_expected(d, ref, prompts, model_type, attention_mask=False):
    """Greedy tokens, top-2 margins and first-step logits of ref on each prompt into d/expected.json;
    returns {tensor name: shape} of the folder's safetensors."""
    from safetensors import safe_open
    ref.eval()
    cases = []
    for prompt in prompts:
        ids = torch.tensor([prompt])
        extra = {"attention_mask": torch.ones_like(ids)} if attention_mask else {}
        with torch.no_grad():
            out = ref.generate(ids, max_new_tokens=NEW_TOKENS, do_sample=False, output_logits=True,
                               return_dict_in_generate=True, eos_token_id=None, pad_token_id=0, **extra)
        tokens = out.sequences[0, len(prompt):].tolist()
        steps = []
        for lg in out.logits:
            top = torch.topk(lg[0].float(), 2)
            steps.append({"margin": float(top.values[0] - top.values[1])})
        first = out.logits[0][0].float().tolist()
        cases.append({"prompt": prompt, "tokens": tokens, "steps": steps, "first_logits": first})
    with open(os.path.join(d, "expected.json"), "w") as f:
        json.dump({"transformers": transformers.__version__, "torch": torch.__version__,
                   "model_type": model_type, "cases": cases}, f)
    names = {}
    for fn in sorted(os.listdir(d)):
        if fn.endswith(".safetensors"):
            with safe_open(os.path.join(d, fn), "pt") as st:
                for k in st.keys():
                    names[k] = list(st.get_slice(k).get_shape())
    return names


def make_case(out, name, model_type, kw, prepare, prompts, after_save=None):
    """One fixture folder: a model from the config, weights set by prepare(model), saved in bf16,
    and transformers' reference on the prompts (the saved bf16 weights computed in float32)."""
    cfg = AutoConfig.for_model(model_type, **kw)
    cfg._attn_implementation = "eager"
    model = AutoModelForCausalLM.from_config(cfg)
    prepare(model)
    model = model.to(torch.bfloat16)
    d = os.path.join(out, name)
    shutil.rmtree(d, ignore_errors=True)
    model.save_pretrained(d, safe_serialization=True)
    if after_save:
        after_save(d)
    ref = AutoModelForCausalLM.from_pretrained(d, dtype=torch.float32, attn_implementation="eager")
    names = record_expected(d, ref, prompts, model_type)
    print(name, "tensors:", len(names), sorted(names.items())[:12])
    return names


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", required=True)
    args = ap.parse_args()
    torch.manual_seed(0)
    for i, (name, (model_type, kw)) in enumerate(CASES.items()):
        old = (lambda d: old_style_config(os.path.join(d, "config.json"))) if name.endswith("oldcfg") else None
        make_case(args.out, name, model_type, kw, lambda m, i=i: randomize(m, 1000 + i), PROMPTS, old)


if __name__ == "__main__":
    main()
