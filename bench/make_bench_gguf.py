#!/usr/bin/env python3
"""Writes a random-weight Llama GGUF of a chosen shape and tensor type, for speed benchmarks.

The tokenizer metadata (tokenizer.ggml.*) is copied from another GGUF so llama.cpp accepts the
file; the weights are noise, so only speed (not text) is meaningful.

    python3 bench/make_bench_gguf.py --hidden 1024 --layers 16 --heads 16 --kv-heads 4 \
        --ff 2816 --type q8_0 --out /tmp/bench-270m-q8_0.gguf
"""
import argparse
import os
import sys

import numpy as np
import gguf
from gguf import GGMLQuantizationType as QT

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
DEFAULT_VOCAB = os.path.join(REPO, "..", "shared", "models", "llama-2-tiny-random.gguf")
FILE_TYPES = {"f32": gguf.LlamaFileType.ALL_F32, "f16": gguf.LlamaFileType.MOSTLY_F16,
              "q8_0": gguf.LlamaFileType.MOSTLY_Q8_0}


def parse_args(argv):
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--hidden", type=int, required=True)
    p.add_argument("--layers", type=int, required=True)
    p.add_argument("--heads", type=int, required=True)
    p.add_argument("--kv-heads", type=int, default=None, help="default: --heads")
    p.add_argument("--ff", type=int, required=True)
    p.add_argument("--context", type=int, default=4096, help="llama.context_length")
    p.add_argument("--rope-theta", type=float, default=10000.0)
    p.add_argument("--eps", type=float, default=1e-5, help="RMS norm epsilon")
    p.add_argument("--vocab-from", default=DEFAULT_VOCAB,
                   help="GGUF whose tokenizer.ggml.* metadata is copied (default: %(default)s)")
    p.add_argument("--type", choices=sorted(FILE_TYPES), default="f16")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--out", required=True)
    a = p.parse_args(argv)
    a.kv_heads = a.kv_heads or a.heads
    if min(a.hidden, a.layers, a.heads, a.kv_heads, a.ff) <= 0:
        p.error("--hidden, --layers, --heads, --kv-heads and --ff must be positive")
    if a.hidden % a.heads:
        p.error(f"--hidden {a.hidden} is not a multiple of --heads {a.heads}")
    if a.heads % a.kv_heads:
        p.error(f"--heads {a.heads} is not a multiple of --kv-heads {a.kv_heads}")
    if (a.hidden // a.heads) % 2:
        p.error(f"head size {a.hidden // a.heads} must be even for rotary embeddings")
    if a.type == "q8_0" and (a.hidden % 32 or a.ff % 32):
        p.error("q8_0 needs --hidden and --ff to be multiples of 32 (the Q8_0 block size)")
    if not os.path.isfile(a.vocab_from):
        sys.exit(f"make_bench_gguf: tokenizer source GGUF not found: {a.vocab_from} "
                 "(pass --vocab-from PATH to a llama GGUF with tokenizer.ggml.* metadata)")
    return a


def read_tokenizer(path):
    """Returns [(key, value, value_type, sub_type)] for every tokenizer.ggml.* field of a GGUF."""
    reader = gguf.GGUFReader(path)
    out = []
    for key, field in reader.fields.items():
        if not key.startswith("tokenizer.ggml."):
            continue
        value = field.contents()
        sub = field.types[1] if field.types[0] == gguf.GGUFValueType.ARRAY else None
        out.append((key, value, field.types[0], sub))
    if not any(k == "tokenizer.ggml.tokens" for k, *_ in out):
        sys.exit(f"make_bench_gguf: {path} has no tokenizer.ggml.tokens")
    return out


def add_tokenizer(writer, fields):
    for key, value, vtype, sub in fields:
        if vtype == gguf.GGUFValueType.ARRAY:
            # An explicit sub_type keeps the element type llama.cpp checks (scores f32, types i32).
            writer.add_key_value(key, list(value), vtype, sub_type=sub)
        else:
            writer.add_key_value(key, value, vtype)


def weight(rng, rows, cols, kind, std):
    """A (rows, cols) matrix in numpy order (rows = outputs), stored as `kind`."""
    w = rng.standard_normal((rows, cols), dtype=np.float32)
    w *= np.float32(std)
    if kind == "f32":
        return w, None
    if kind == "f16":
        return w.astype(np.float16), None
    return gguf.quants.quantize(w, QT.Q8_0), QT.Q8_0


def main(argv=None):
    a = parse_args(argv)
    fields = read_tokenizer(a.vocab_from)
    vocab = len(dict((k, v) for k, v, *_ in fields)["tokenizer.ggml.tokens"])
    head_dim = a.hidden // a.heads
    kv_dim = head_dim * a.kv_heads
    rng = np.random.default_rng(a.seed)

    tmp = a.out + ".tmp"
    w = gguf.GGUFWriter(tmp, "llama")
    w.add_name(f"bench-random-h{a.hidden}-l{a.layers}-{a.type}")
    w.add_context_length(a.context)
    w.add_embedding_length(a.hidden)
    w.add_block_count(a.layers)
    w.add_feed_forward_length(a.ff)
    w.add_head_count(a.heads)
    w.add_head_count_kv(a.kv_heads)
    w.add_rope_dimension_count(head_dim)
    w.add_rope_freq_base(a.rope_theta)
    w.add_layer_norm_rms_eps(a.eps)
    w.add_file_type(int(FILE_TYPES[a.type]))
    w.add_custom_alignment(32)
    w.add_quantization_version(gguf.GGML_QUANT_VERSION)
    add_tokenizer(w, fields)

    def put(name, rows, cols, std):
        data, raw = weight(rng, rows, cols, a.type, std)
        w.add_tensor(name, data, raw_dtype=raw)

    def put_norm(name):
        w.add_tensor(name, np.ones(a.hidden, dtype=np.float32))

    n_params = 0
    put("token_embd.weight", vocab, a.hidden, 1.0)
    n_params += vocab * a.hidden
    for i in range(a.layers):
        b = f"blk.{i}."
        put_norm(b + "attn_norm.weight")
        put(b + "attn_q.weight", a.hidden, a.hidden, a.hidden ** -0.5)
        put(b + "attn_k.weight", kv_dim, a.hidden, a.hidden ** -0.5)
        put(b + "attn_v.weight", kv_dim, a.hidden, a.hidden ** -0.5)
        put(b + "attn_output.weight", a.hidden, a.hidden, a.hidden ** -0.5)
        put_norm(b + "ffn_norm.weight")
        put(b + "ffn_gate.weight", a.ff, a.hidden, a.hidden ** -0.5)
        put(b + "ffn_up.weight", a.ff, a.hidden, a.hidden ** -0.5)
        put(b + "ffn_down.weight", a.hidden, a.ff, a.ff ** -0.5)
        n_params += 2 * a.hidden + 2 * a.hidden * (a.hidden + kv_dim) + 3 * a.hidden * a.ff
    put_norm("output_norm.weight")
    put("output.weight", vocab, a.hidden, a.hidden ** -0.5)
    n_params += a.hidden + vocab * a.hidden

    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()
    os.replace(tmp, a.out)
    print(f"wrote {a.out}: {n_params / 1e6:.1f}M parameters, {a.type}, vocab {vocab}, "
          f"{os.path.getsize(a.out) / 2**20:.1f} MiB")


if __name__ == "__main__":
    main()
