#!/usr/bin/env python3
"""Converts a Llama HF folder (safetensors, bf16/f16/f32) to a GGUF that llama.cpp loads, with the
same weights, and gives both a matching byte-level BPE vocabulary when the folder has none.

Made for scripts/make_random_model.py output, so TensorFold (reading the folder) and llama.cpp
(reading the GGUF) serve identical weights in a side-by-side benchmark:
- tensors are streamed one at a time from memory-mapped safetensors (an 8B model needs no more
  RAM than its largest tensor), matrices keep their type (bf16 stays bf16: no rounding), 1-D
  tensors (norms) become f32 (exact), as llama.cpp's own converter does;
- Q and K rows are permuted the way llama.cpp's convert_hf_to_gguf.py does for its interleaved
  rotary; rope_type "llama3" becomes the rope_freqs tensor it computes;
- vocabulary: "gpt2" (byte-level BPE): ids 0..127 are the ASCII bytes, id 128 is two spaces (the
  one merge), every other id is the text "[id]". Every token decodes to non-empty ASCII text (no
  byte of a multi-byte character that a server would hold back), so one streamed chunk is one
  token on both servers. With --hf-tokenizer the same vocabulary is written
  as tokenizer.json into the HF folder (only when it has none), which `tensorfold serve` needs.

    python3 bench/hf_to_gguf_llama.py /dev/shm/l8b /dev/shm/l8b.gguf --hf-tokenizer
"""
import argparse
import json
import math
import os
import struct
import sys
import time

import numpy as np
import gguf
from gguf import GGMLQuantizationType as QT

from synthetic_vocab import first_id, synthetic_vocab, write_tokenizer

ST_DTYPES = {"BF16": (np.uint16, QT.BF16), "F16": (np.float16, QT.F16), "F32": (np.float32, QT.F32)}
LAYER_NAMES = {
    "input_layernorm.weight": "attn_norm.weight",
    "self_attn.q_proj.weight": "attn_q.weight",
    "self_attn.k_proj.weight": "attn_k.weight",
    "self_attn.v_proj.weight": "attn_v.weight",
    "self_attn.o_proj.weight": "attn_output.weight",
    "post_attention_layernorm.weight": "ffn_norm.weight",
    "mlp.gate_proj.weight": "ffn_gate.weight",
    "mlp.up_proj.weight": "ffn_up.weight",
    "mlp.down_proj.weight": "ffn_down.weight",
}
TOP_NAMES = {"model.embed_tokens.weight": "token_embd.weight", "model.norm.weight": "output_norm.weight",
             "lm_head.weight": "output.weight"}


def fail(msg):
    sys.exit(f"hf_to_gguf_llama: {msg}")


def gguf_name(hf):
    if hf in TOP_NAMES:
        return TOP_NAMES[hf]
    parts = hf.split(".", 3)
    if len(parts) == 4 and parts[0] == "model" and parts[1] == "layers" and parts[2].isdigit() and parts[3] in LAYER_NAMES:
        return f"blk.{int(parts[2])}.{LAYER_NAMES[parts[3]]}"
    return None


class SafetensorsFile:
    """One .safetensors file: its header and a read-only memory map of its data."""

    def __init__(self, path):
        self.path = path
        size = os.path.getsize(path)
        with open(path, "rb") as f:
            raw = f.read(8)
            if len(raw) != 8:
                fail(f"{path}: shorter than the 8-byte header length")
            (n,) = struct.unpack("<Q", raw)
            if n > size - 8:
                fail(f"{path}: header length {n} exceeds the file size {size}")
            self.header = json.loads(f.read(n))
        self.base = 8 + n
        self.map = np.memmap(path, dtype=np.uint8, mode="r") if size > self.base else np.zeros(0, np.uint8)

    def tensors(self):
        return {k: v for k, v in self.header.items() if k != "__metadata__"}

    def array(self, name):
        info = self.header[name]
        if info["dtype"] not in ST_DTYPES:
            fail(f"{self.path}: tensor {name} has dtype {info['dtype']} (supported: {', '.join(ST_DTYPES)})")
        np_type = ST_DTYPES[info["dtype"]][0]
        a, b = info["data_offsets"]
        shape = tuple(info["shape"])
        if b - a != int(np.prod(shape, dtype=np.int64)) * np.dtype(np_type).itemsize:
            fail(f"{self.path}: tensor {name} spans {b - a} bytes for shape {shape} {info['dtype']}")
        if self.base + b > len(self.map):
            fail(f"{self.path}: tensor {name} ends past the end of the file")
        return self.map[self.base + a:self.base + b].view(np_type).reshape(shape), info["dtype"]


def open_weights(folder):
    """{hf tensor name: SafetensorsFile} over model.safetensors or the shards of its index."""
    index = os.path.join(folder, "model.safetensors.index.json")
    if os.path.isfile(index):
        with open(index, encoding="utf-8") as f:
            files = sorted(set(json.load(f)["weight_map"].values()))
    else:
        files = sorted(x for x in os.listdir(folder) if x.endswith(".safetensors"))
    if not files:
        fail(f"{folder}: no .safetensors files")
    where = {}
    for fn in files:
        st = SafetensorsFile(os.path.join(folder, fn))
        for name in st.tensors():
            where[name] = st
    return where


def permute(w, n_head):
    """llama.cpp's LlamaModel.permute: HF's rotate-half row order to interleaved pairs."""
    return w.reshape(n_head, 2, w.shape[0] // n_head // 2, *w.shape[1:]).swapaxes(1, 2).reshape(w.shape)


def rope_params(cfg):
    """(theta, scaling dict or {}) from rope_parameters (transformers 5) or rope_theta + rope_scaling."""
    p = cfg.get("rope_parameters") or {}
    theta = p.get("rope_theta", cfg.get("rope_theta", 10000.0))
    scaling = p if p.get("rope_type") not in (None, "default") else (cfg.get("rope_scaling") or {})
    return float(theta), scaling


def llama3_rope_factors(scaling, theta, head_dim):
    """The rope_freqs tensor of convert_hf_to_gguf.py for rope_type llama3 (same float32 steps)."""
    freqs = 1.0 / (np.float32(theta) ** (np.arange(0, head_dim, 2, dtype=np.float32) / np.float32(head_dim)))
    factor = scaling.get("factor", 8.0)
    low, high = scaling.get("low_freq_factor", 1.0), scaling.get("high_freq_factor", 4.0)
    old_ctx = scaling.get("original_max_position_embeddings", 8192)
    low_wl, high_wl = old_ctx / low, old_ctx / high
    out = []
    for f in freqs:
        wl = 2 * math.pi / float(f)
        if wl < high_wl:
            out.append(1.0)
        elif wl > low_wl:
            out.append(factor)
        else:
            s = (old_ctx / wl - low) / (high - low)
            out.append(1 / ((1 - s) / factor + s))
    return np.array(out, dtype=np.float32)


def convert(folder, out, hf_tokenizer=False, name=None, outtype="keep"):
    with open(os.path.join(folder, "config.json"), encoding="utf-8") as f:
        cfg = json.load(f)
    arch = (cfg.get("architectures") or [""])[0]
    if cfg.get("model_type") != "llama" and arch != "LlamaForCausalLM":
        fail(f"{folder}: model_type {cfg.get('model_type')!r} / {arch!r} is not a Llama")
    H, L, V = cfg["hidden_size"], cfg["num_hidden_layers"], cfg["vocab_size"]
    nh = cfg["num_attention_heads"]
    nkv = cfg.get("num_key_value_heads", nh)
    hd = cfg.get("head_dim") or H // nh
    if cfg.get("attention_bias") or cfg.get("mlp_bias"):
        fail(f"{folder}: attention_bias / mlp_bias are not supported")
    theta, scaling = rope_params(cfg)
    rtype = (scaling.get("rope_type") or scaling.get("type") or "default").lower()
    if rtype not in ("default", "llama3"):
        fail(f"{folder}: rope_type {rtype!r} is not supported (default, llama3)")

    where = open_weights(folder)
    plan = []  # (gguf name, hf name or None, shape, np dtype, ggml type)
    for hf in where:
        g = gguf_name(hf)
        if g is None:
            fail(f"{folder}: tensor {hf} has no llama GGUF name")
    order = ["model.embed_tokens.weight"] + [f"model.layers.{i}.{k}" for i in range(L) for k in LAYER_NAMES] + \
            ["model.norm.weight"] + (["lm_head.weight"] if "lm_head.weight" in where else [])
    missing = [n for n in order if n not in where]
    if missing:
        fail(f"{folder}: missing tensors, e.g. {missing[:3]}")
    if len(order) != len(where):
        fail(f"{folder}: {len(where) - len(order)} tensors beyond the {L} layers in config.json")
    for hf in order:
        info = where[hf].header[hf]
        np_type, ggml = ST_DTYPES.get(info["dtype"], (None, None))
        if np_type is None:
            fail(f"{folder}: tensor {hf} has dtype {info['dtype']}")
        shape = tuple(info["shape"])
        if len(shape) == 1 or outtype == "f32":
            np_type, ggml = np.float32, QT.F32
        plan.append((gguf_name(hf), hf, shape, np_type, ggml))
    if shape_of(plan, "token_embd.weight") != (V, H):
        fail(f"{folder}: embed_tokens is {shape_of(plan, 'token_embd.weight')}, config says ({V}, {H})")
    rope_freqs = llama3_rope_factors(scaling, theta, hd) if rtype == "llama3" else None

    try:
        tokens, merges = synthetic_vocab(V)
    except ValueError as e:
        fail(f"{folder}: {e}")
    if hf_tokenizer:
        tj = os.path.join(folder, "tokenizer.json")
        if os.path.exists(tj):
            print(f"hf_to_gguf_llama: {tj} exists, left as it is (its vocabulary may differ from the GGUF's)")
        write_tokenizer(folder)

    tmp = out + ".tmp"
    w = gguf.GGUFWriter(tmp, "llama")
    w.add_name(name or os.path.basename(os.path.normpath(folder)))
    w.add_context_length(cfg.get("max_position_embeddings", 4096))
    w.add_embedding_length(H)
    w.add_block_count(L)
    w.add_feed_forward_length(cfg["intermediate_size"])
    w.add_head_count(nh)
    w.add_head_count_kv(nkv)
    w.add_rope_dimension_count(hd)
    if hd != H // nh:
        w.add_key_length(hd)
        w.add_value_length(hd)
    w.add_rope_freq_base(theta)
    w.add_layer_norm_rms_eps(cfg.get("rms_norm_eps", 1e-5))
    w.add_vocab_size(V)
    types = {t for *_, t in plan if t != QT.F32}
    ftype = {QT.BF16: gguf.LlamaFileType.MOSTLY_BF16, QT.F16: gguf.LlamaFileType.MOSTLY_F16}.get(
        types.pop() if len(types) == 1 else None, gguf.LlamaFileType.ALL_F32)
    w.add_file_type(int(ftype))
    w.add_tokenizer_model("gpt2")
    w.add_tokenizer_pre("default")
    w.add_token_list(tokens)
    w.add_token_types([int(gguf.TokenType.NORMAL)] * V)
    w.add_token_merges(merges)
    bos, eos = first_id(cfg.get("bos_token_id")), first_id(cfg.get("eos_token_id"))
    if bos is not None and 0 <= bos < V:
        w.add_bos_token_id(bos)
    if eos is not None and 0 <= eos < V:
        w.add_eos_token_id(eos)
    w.add_add_bos_token(False)

    if rope_freqs is not None:
        w.add_tensor_info("rope_freqs.weight", rope_freqs.shape, rope_freqs.dtype, rope_freqs.nbytes)
    for g, hf, shape, np_type, ggml in plan:
        nbytes = int(np.prod(shape, dtype=np.int64)) * np.dtype(np_type).itemsize
        w.add_tensor_info(g, shape, np.dtype(np_type), nbytes, raw_dtype=ggml if ggml == QT.BF16 else None)
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_ti_data_to_file()
    t0, done = time.time(), 0
    if rope_freqs is not None:
        w.write_tensor_data(rope_freqs)
    for g, hf, shape, np_type, ggml in plan:
        a, st_type = where[hf].array(hf)
        if np_type == np.float32:
            a = bf16_to_f32(a) if st_type == "BF16" else a.astype(np.float32)
        if g.endswith("attn_q.weight"):
            a = permute(a, nh)
        elif g.endswith("attn_k.weight"):
            a = permute(a, nkv)
        w.write_tensor_data(np.ascontiguousarray(a))
        done += a.nbytes
    w.close()
    os.replace(tmp, out)
    dt = time.time() - t0
    print(f"hf_to_gguf_llama: wrote {out}: {len(plan)} tensors{' + rope_freqs' if rope_freqs is not None else ''}, "
          f"{ftype.name}, vocab {V}, {done / 2**30:.2f} GiB in {dt:.1f} s")


def shape_of(plan, name):
    return next((s for g, _, s, *_ in plan if g == name), None)


def bf16_to_f32(a):
    return (a.astype(np.uint32) << 16).view(np.float32)


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("folder", help="HF model folder (config.json + safetensors)")
    ap.add_argument("out", help="GGUF file to write")
    ap.add_argument("--hf-tokenizer", action="store_true",
                    help="also write the same vocabulary as FOLDER/tokenizer.json when FOLDER has none")
    ap.add_argument("--name", help="general.name (default: the folder's name)")
    ap.add_argument("--outtype", choices=["keep", "f32"], default="keep",
                    help="matrix type: keep the folder's (default) or f32 (exact; llama.cpp then computes in f32)")
    a = ap.parse_args(argv)
    convert(a.folder, a.out, a.hf_tokenizer, a.name, a.outtype)


if __name__ == "__main__":
    main()
