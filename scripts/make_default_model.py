#!/usr/bin/env python3
"""Makes the built-in default model: a small Llama-architecture model with RANDOM weights and a
byte-level BPE tokenizer trained on the Debian `fortunes` corpus (BSD licence). It writes noise,
not text: it exists so `tensorfold serve` and `tensorfold run` work with no download. A trained
default model replaces it later.

    apt-get install fortunes && python3 scripts/make_default_model.py --out models/default
"""
import argparse
import glob
import json
import os
import struct

import numpy as np
from tokenizers import Tokenizer, decoders, models, pre_tokenizers, processors, trainers, Regex

LLAMA3_SPLIT = (r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n]*"
                r"|\s*[\r\n]+|\s+(?!\S)|\s+")
SPECIAL = ["<|begin_of_text|>", "<|end_of_text|>", "<|im_start|>", "<|im_end|>"]
CHAT_TEMPLATE = ("{{ bos_token }}{% for message in messages %}{{ '<|im_start|>' + message['role'] + '\\n' + "
                 "message['content'] + '<|im_end|>' + '\\n' }}{% endfor %}"
                 "{% if add_generation_prompt %}{{ '<|im_start|>assistant\\n' }}{% endif %}")
CONFIG = dict(vocab_size=4096, hidden_size=256, intermediate_size=640, num_hidden_layers=4,
              num_attention_heads=4, num_key_value_heads=2, head_dim=64, max_position_embeddings=4096,
              rms_norm_eps=1e-5, tie_word_embeddings=True)


def corpus_files():
    files = [f for f in glob.glob("/usr/share/games/fortunes/*") if "." not in os.path.basename(f)
             and os.path.isfile(f)]
    if not files:
        raise SystemExit("no corpus: apt-get install fortunes")
    return sorted(files)


def train_tokenizer(vocab):
    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.Sequence([
        pre_tokenizers.Split(Regex(LLAMA3_SPLIT), behavior="isolated"),
        pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=False)])
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(vocab_size=vocab, special_tokens=SPECIAL,
                                  initial_alphabet=pre_tokenizers.ByteLevel.alphabet(), show_progress=False)
    tok.train(corpus_files(), trainer)
    bos = tok.token_to_id(SPECIAL[0])
    tok.post_processor = processors.TemplateProcessing(single=f"{SPECIAL[0]} $A", pair=f"{SPECIAL[0]} $A {SPECIAL[0]} $B",
                                                       special_tokens=[(SPECIAL[0], bos)])
    return tok


def bf16_bytes(a):
    u = a.astype(np.float32).view(np.uint32)
    u = (u + 0x7FFF + ((u >> 16) & 1)) >> 16
    return u.astype(np.uint16).tobytes()


def save_safetensors(path, tensors):
    header, blobs, off = {}, [], 0
    for name, arr in tensors.items():
        b = bf16_bytes(arr)
        header[name] = {"dtype": "BF16", "shape": list(arr.shape), "data_offsets": [off, off + len(b)]}
        blobs.append(b)
        off += len(b)
    h = json.dumps(header, separators=(",", ":")).encode()
    h += b" " * ((8 - len(h) % 8) % 8)
    with open(path, "wb") as f:
        f.write(struct.pack("<Q", len(h)))
        f.write(h)
        for b in blobs:
            f.write(b)


def random_weights(c, rng):
    H, I, L = c["hidden_size"], c["intermediate_size"], c["num_hidden_layers"]
    hd, nh, nkv = c["head_dim"], c["num_attention_heads"], c["num_key_value_heads"]
    mat = lambda r, k: rng.standard_normal((r, k)) / np.sqrt(k)
    # Small embeddings keep the tied head's logits moderate, so sampling varies.
    w = {"model.embed_tokens.weight": 0.15 * rng.standard_normal((c["vocab_size"], H)),
         "model.norm.weight": np.ones(H)}
    for i in range(L):
        p = f"model.layers.{i}."
        w[p + "input_layernorm.weight"] = np.ones(H)
        w[p + "post_attention_layernorm.weight"] = np.ones(H)
        w[p + "self_attn.q_proj.weight"] = mat(nh * hd, H)
        w[p + "self_attn.k_proj.weight"] = mat(nkv * hd, H)
        w[p + "self_attn.v_proj.weight"] = mat(nkv * hd, H)
        w[p + "self_attn.o_proj.weight"] = mat(H, nh * hd)
        w[p + "mlp.gate_proj.weight"] = mat(I, H)
        w[p + "mlp.up_proj.weight"] = mat(I, H)
        w[p + "mlp.down_proj.weight"] = mat(H, I)
    return w


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", default="models/default")
    ap.add_argument("--seed", type=int, default=1234)
    args = ap.parse_args()
    os.makedirs(args.out, exist_ok=True)
    tok = train_tokenizer(CONFIG["vocab_size"])
    tok.save(os.path.join(args.out, "tokenizer.json"))
    bos, eos = tok.token_to_id(SPECIAL[0]), tok.token_to_id(SPECIAL[1])
    im_end = tok.token_to_id(SPECIAL[3])
    cfg = dict(architectures=["LlamaForCausalLM"], model_type="llama", bos_token_id=bos, eos_token_id=eos,
               rope_parameters={"rope_type": "default", "rope_theta": 10000.0}, torch_dtype="bfloat16", **CONFIG)
    json.dump(cfg, open(os.path.join(args.out, "config.json"), "w"), indent=2)
    json.dump({"bos_token_id": bos, "eos_token_id": [eos, im_end], "do_sample": True, "temperature": 0.8,
               "top_p": 0.95}, open(os.path.join(args.out, "generation_config.json"), "w"), indent=2)
    json.dump({"bos_token": SPECIAL[0], "eos_token": SPECIAL[1], "add_bos_token": True,
               "chat_template": CHAT_TEMPLATE, "model_max_length": CONFIG["max_position_embeddings"]},
              open(os.path.join(args.out, "tokenizer_config.json"), "w"), indent=2)
    save_safetensors(os.path.join(args.out, "model.safetensors"), random_weights(CONFIG, np.random.default_rng(args.seed)))
    with open(os.path.join(args.out, "README.md"), "w") as f:
        f.write("# Built-in default model\n\nLlama architecture, random weights (it writes noise, not text), "
                "tokenizer trained on the Debian `fortunes` corpus (BSD licence).\n"
                "Made by `scripts/make_default_model.py`.\n")


if __name__ == "__main__":
    main()
