#!/usr/bin/env python3
"""The synthetic byte-level BPE vocabulary that random-weight models are served with (standard
library only).

"gpt2" byte-level BPE of vocab_size ids: ids 0..127 are the ASCII bytes, id 128 is two spaces (the
one merge), every other id is the text "[id]". Every token decodes to non-empty ASCII text (no byte
of a multi-byte character that a server would hold back), so one streamed chunk is one token.
bench/hf_to_gguf_llama.py writes the same vocabulary into the GGUF it makes for llama.cpp, and
scripts/make_random_model.py into every folder it makes.

    python3 bench/synthetic_vocab.py FOLDER     # writes FOLDER/tokenizer.json for its config.json

Beside it goes a tokenizer_config.json naming the tokens at config.json's first bos_token_id and
eos_token_id as bos and eos (plain tokens such as "[128001]"), with no BOS added to a prompt, as
in the GGUF. The folder's tokenizer.json is left alone when it exists, and so is its
tokenizer_config.json.
"""
import argparse
import json
import os
import sys


def byte_unicode():
    """GPT-2's bytes_to_unicode: byte -> printable character."""
    bs = list(range(ord("!"), ord("~") + 1)) + list(range(ord("¡"), ord("¬") + 1)) + list(range(ord("®"), ord("ÿ") + 1))
    cs = bs[:]
    n = 0
    for b in range(256):
        if b not in bs:
            bs.append(b)
            cs.append(256 + n)
            n += 1
    return {b: chr(c) for b, c in zip(bs, cs)}


def synthetic_vocab(n):
    """(tokens, merges) of the vocabulary described in the module docstring."""
    if n < 130:
        raise ValueError(f"vocab_size {n} is below 130 (128 ASCII bytes, one merge, one more)")
    bu = byte_unicode()
    space = bu[ord(" ")]
    tokens = [bu[b] for b in range(128)] + [space + space] + [f"[{i}]" for i in range(129, n)]
    return tokens, [f"{space} {space}"]


def hf_tokenizer_json(tokens, merges):
    return {"version": "1.0", "truncation": None, "padding": None, "added_tokens": [], "normalizer": None,
            "pre_tokenizer": {"type": "ByteLevel", "add_prefix_space": False, "trim_offsets": True, "use_regex": True},
            "post_processor": None, "decoder": {"type": "ByteLevel", "add_prefix_space": False, "trim_offsets": True,
                                                 "use_regex": True},
            "model": {"type": "BPE", "dropout": None, "unk_token": None, "continuing_subword_prefix": None,
                      "end_of_word_suffix": None, "fuse_unk": False, "byte_fallback": False, "ignore_merges": False,
                      "vocab": {t: i for i, t in enumerate(tokens)}, "merges": merges}}


def first_id(v):
    """A config's token id, or the first of a list of them (None for an empty list)."""
    if isinstance(v, list):
        return v[0] if v else None
    return v


def tokenizer_config(cfg, tokens):
    """tokenizer_config.json for a model config: bos and eos where its ids fall in the vocabulary."""
    out = {"add_bos_token": False, "add_eos_token": False}
    for key in ("bos", "eos"):
        i = first_id(cfg.get(f"{key}_token_id"))
        if isinstance(i, int) and 0 <= i < len(tokens):
            out[f"{key}_token"] = tokens[i]
    return out


def write_json(path, obj):
    tmp = path + ".tmp"
    with open(tmp, "w", encoding="utf-8") as f:
        json.dump(obj, f, ensure_ascii=False)
    os.replace(tmp, path)


def write_tokenizer(folder):
    """Writes folder/tokenizer.json for its config.json's vocab_size, and tokenizer_config.json, unless
    tokenizer.json exists; returns its path."""
    tj = os.path.join(folder, "tokenizer.json")
    if os.path.exists(tj):
        return tj
    with open(os.path.join(folder, "config.json"), encoding="utf-8") as f:
        cfg = json.load(f)
    vocab = cfg.get("vocab_size") or cfg.get("text_config", {}).get("vocab_size")
    if not isinstance(vocab, int):
        raise ValueError(f"{folder}/config.json has no integer vocab_size")
    tokens, merges = synthetic_vocab(vocab)
    tc = os.path.join(folder, "tokenizer_config.json")
    if not os.path.exists(tc):
        write_json(tc, tokenizer_config({**cfg.get("text_config", {}), **cfg}, tokens))
    # tokenizer.json last: its presence is what marks the folder done.
    write_json(tj, hf_tokenizer_json(tokens, merges))
    return tj


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("folder", help="model folder with config.json")
    a = ap.parse_args(argv)
    try:
        print(write_tokenizer(a.folder))
    except (OSError, ValueError) as e:
        sys.exit(f"synthetic_vocab: {e}")


if __name__ == "__main__":
    main()
