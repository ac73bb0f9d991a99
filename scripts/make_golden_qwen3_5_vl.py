#!/usr/bin/env python3
"""Golden fixture for multimodal Qwen3.5 checkpoints served text-only: a tiny random bf16
Qwen3_5ForConditionalGeneration (language model under model.language_model.*, a tiny vision tower under
model.visual.*, lm_head.weight at the top level, a few mtp.* tensors as released checkpoints carry), with
greedy tokens and logits from the ConditionalGeneration model itself on text-only prompts (float32, CPU).

    /work/torchenv/bin/python scripts/make_golden_qwen3_5_vl.py --out tests/fixtures/golden

Same folder format as scripts/make_golden.py. One prompt is longer than transformers' delta-rule chunk of 64.
"""
import argparse
import os
import shutil
import sys

import torch
from safetensors import safe_open
from safetensors.torch import save_file
from transformers import Qwen3_5Config, Qwen3_5ForConditionalGeneration

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from make_golden import randomize, record_expected  # noqa: E402
from make_golden_qwen3_next import ALL_PROMPTS, BASE, tune  # noqa: E402

TEXT = dict(BASE, layer_types=["linear_attention", "full_attention", "linear_attention", "full_attention"],
            tie_word_embeddings=False,
            rope_parameters={"rope_type": "default", "rope_theta": 10000.0, "partial_rotary_factor": 0.5,
                             "mrope_section": [2, 1, 1], "mrope_interleaved": True})
VISION = dict(depth=1, hidden_size=32, intermediate_size=64, num_heads=2, in_channels=3, patch_size=4,
              temporal_patch_size=2, spatial_merge_size=2, out_hidden_size=64, num_position_embeddings=16)


def add_mtp(path, hidden, seed):
    """Multi-token-prediction tensors as released checkpoints ship them; transformers ignores them on load."""
    g = torch.Generator().manual_seed(seed)
    tensors = {}
    with safe_open(path, "pt") as st:
        meta = st.metadata()
        for k in st.keys():
            tensors[k] = st.get_tensor(k)
    tensors["mtp.fc.weight"] = (0.1 * torch.randn(hidden, 2 * hidden, generator=g)).to(torch.bfloat16)
    tensors["mtp.norm.weight"] = torch.ones(hidden, dtype=torch.bfloat16)
    tensors["mtp.pre_fc_norm_embedding.weight"] = torch.ones(hidden, dtype=torch.bfloat16)
    tensors["mtp.pre_fc_norm_hidden.weight"] = torch.ones(hidden, dtype=torch.bfloat16)
    save_file(tensors, path, metadata=meta)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", required=True)
    args = ap.parse_args()
    torch.manual_seed(0)
    name = "qwen3_5_vl"
    cfg = Qwen3_5Config(text_config=TEXT, vision_config=VISION, tie_word_embeddings=False)
    cfg._attn_implementation = "eager"
    model = Qwen3_5ForConditionalGeneration(cfg)
    randomize(model, 2100)
    tune(model, 3100)
    model = model.to(torch.bfloat16)
    d = os.path.join(args.out, name)
    shutil.rmtree(d, ignore_errors=True)
    model.save_pretrained(d, safe_serialization=True)
    add_mtp(os.path.join(d, "model.safetensors"), TEXT["hidden_size"], 4100)
    ref = Qwen3_5ForConditionalGeneration.from_pretrained(d, dtype=torch.float32, attn_implementation="eager")
    emb = ref.model.language_model.embed_tokens.weight
    assert ref.lm_head.weight.data_ptr() != emb.data_ptr() and not torch.equal(ref.lm_head.weight, emb)
    record_expected(d, ref, ALL_PROMPTS, "qwen3_5", attention_mask=True)
    with safe_open(os.path.join(d, "model.safetensors"), "pt") as st:
        keys = sorted(st.keys())
    print(name, "tensors:", len(keys))
    for k in keys:
        if "layers" not in k or ".layers.0." in k or ".layers.1." in k:
            print("  ", k)


if __name__ == "__main__":
    main()
