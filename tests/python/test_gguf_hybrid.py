"""Hybrid GGUF files (nemotron_h_moe, qwen3next, qwen35, qwen35moe) as llama.cpp's converter writes them must load into the
same model as the HF folder: same greedy tokens and bit-identical logprobs. The files are written here by
`export_hybrid_gguf`, which mirrors convert_hf_to_gguf.py (names, shapes, dtypes, metadata keys and the
value transforms); scripts/check_gguf_hybrid.py checks that mirror against the real converter."""
import json
import os
import shutil
import subprocess
import sys

import numpy as np
import pytest

gguf = pytest.importorskip("gguf")

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "bench"))
from synthetic_vocab import byte_unicode  # noqa: E402
from test_gguf_models import GOLDEN, greedy, permute, read_bf16_safetensors  # noqa: E402

VOCAB_TOKENS = 512


def byte_level_tokens(n):
    """A byte-level BPE vocabulary of n tokens without merges (the 256 byte symbols, then placeholders)."""
    syms = sorted(byte_unicode().values())
    return syms + [f"<x{i}>" for i in range(len(syms), n)]


def write_tokenizer_json(folder, tokens):
    tok = {"version": "1.0", "truncation": None, "padding": None, "added_tokens": [], "normalizer": None,
           "pre_tokenizer": {"type": "ByteLevel", "add_prefix_space": False, "trim_offsets": True, "use_regex": True},
           "post_processor": None,
           "decoder": {"type": "ByteLevel", "add_prefix_space": True, "trim_offsets": True, "use_regex": True},
           "model": {"type": "BPE", "dropout": None, "unk_token": None, "continuing_subword_prefix": None,
                     "end_of_word_suffix": None, "fuse_unk": False, "byte_fallback": False, "ignore_merges": False,
                     "vocab": {t: i for i, t in enumerate(tokens)}, "merges": []}}
    with open(os.path.join(folder, "tokenizer.json"), "w") as f:
        json.dump(tok, f)


def _arch(cfg):
    if cfg["model_type"] == "nemotron_h":
        # The converter picks nemotron_h_moe whenever the config names num_experts_per_tok (transformers always does).
        return "nemotron_h_moe" if "num_experts_per_tok" in cfg else "nemotron_h"
    return {"qwen3_next": "qwen3next", "qwen3_5_text": "qwen35", "qwen3_5_moe_text": "qwen35moe"}[cfg["model_type"]]


def tile_v(x, kh, vh, n, axis=0):
    """qwen35's converter: V heads grouped by key head ([g][r]) reordered to tiled ([r][g]), units of n."""
    x = np.moveaxis(x, axis, 0)
    shape = x.shape
    x = x.reshape(kh, vh // kh, n, *shape[1:]).swapaxes(0, 1).reshape(shape)
    return np.moveaxis(x, 0, axis)


def export_hybrid_gguf(folder, out_path, tokens=None, edit_meta=None, edit_tensors=None):
    """Writes folder's HF checkpoint as an f32 GGUF the way llama.cpp's convert_hf_to_gguf.py does."""
    cfg = json.load(open(os.path.join(folder, "config.json")))
    w = read_bf16_safetensors(os.path.join(folder, "model.safetensors"))
    arch = _arch(cfg)
    meta = {}  # key -> (kind, value), written in this order
    tensors = {}

    def kv(key, kind, value):
        meta[key] = (kind, value)

    def a(key, kind, value):
        kv(f"{arch}.{key}", kind, value)

    H = cfg["hidden_size"]
    L = len(cfg["layers_block_type"]) if "layers_block_type" in cfg else cfg["num_hidden_layers"]
    nh, nkv, hd = cfg["num_attention_heads"], cfg["num_key_value_heads"], cfg["head_dim"]
    kv("general.type", "str", "model")
    if arch.startswith("nemotron_h"):
        kinds = cfg["layers_block_type"]
        mlp_layers = [i for i, t in enumerate(kinds) if t == "moe"]
        attn_layers = [i for i, t in enumerate(kinds) if t in ("attention", "full_attention")]
        a("block_count", "u32", L)
        a("context_length", "u32", 2 ** 20)
        a("embedding_length", "u32", H)
        a("feed_forward_length", "i32s", [cfg["moe_intermediate_size"] if i in mlp_layers else 0 for i in range(L)])
        a("attention.head_count", "u32", nh)
        a("attention.head_count_kv", "i32s", [nkv if i in attn_layers else 0 for i in range(L)])
        a("attention.layer_norm_epsilon", "f32", cfg["layer_norm_epsilon"])
        a("expert_count", "u32", cfg["n_routed_experts"])
        a("expert_used_count", "u32", cfg["num_experts_per_tok"])
        a("expert_group_count", "u32", cfg["n_group"])
        a("expert_group_used_count", "u32", cfg["topk_group"])
        kv("general.file_type", "u32", 0)
        a("vocab_size", "u32", -(cfg["vocab_size"] // -8) * 8)
        a("rope.dimension_count", "u32", hd)
        a("ssm.conv_kernel", "u32", cfg["conv_kernel"])
        a("ssm.state_size", "u32", cfg["ssm_state_size"])
        a("ssm.group_count", "u32", cfg["n_groups"])
        a("ssm.inner_size", "u32", cfg["mamba_num_heads"] * cfg["mamba_head_dim"])
        a("ssm.time_step_rank", "u32", cfg["mamba_num_heads"])
        a("rope.scaling.finetuned", "bool", False)
        a("attention.key_length", "u32", hd)
        a("attention.value_length", "u32", hd)
        a("expert_feed_forward_length", "u32", cfg["moe_intermediate_size"])
        a("expert_shared_feed_forward_length", "u32", cfg["moe_shared_expert_intermediate_size"])
        a("expert_shared_count", "u32", cfg["n_shared_experts"])
        a("expert_weights_norm", "bool", cfg["norm_topk_prob"])
        a("expert_weights_scale", "f32", cfg["routed_scaling_factor"])
        G = cfg["n_groups"]
        tensors["token_embd.weight"] = w["backbone.embeddings.weight"]
        tensors["output_norm.weight"] = w["backbone.norm_f.weight"]
        tensors["output.weight"] = w["lm_head.weight"]
        for i in range(L):
            p, b = f"backbone.layers.{i}.mixer.", f"blk.{i}."
            tensors[b + "attn_norm.weight"] = w[f"backbone.layers.{i}.norm.weight"]
            if p + "A_log" in w:
                tensors[b + "ssm_a"] = (-np.exp(w[p + "A_log"])).reshape(-1, 1)
                tensors[b + "ssm_d"] = w[p + "D"].reshape(-1, 1)
                tensors[b + "ssm_conv1d.weight"] = w[p + "conv1d.weight"].squeeze()
                if p + "conv1d.bias" in w:
                    tensors[b + "ssm_conv1d.bias"] = w[p + "conv1d.bias"]
                tensors[b + "ssm_dt.bias"] = w[p + "dt_bias"]
                tensors[b + "ssm_in.weight"] = w[p + "in_proj.weight"]
                tensors[b + "ssm_norm.weight"] = w[p + "norm.weight"].reshape(G, -1)
                tensors[b + "ssm_out.weight"] = w[p + "out_proj.weight"]
            elif p + "q_proj.weight" in w:
                tensors[b + "attn_q.weight"] = permute(w[p + "q_proj.weight"], nh)
                tensors[b + "attn_k.weight"] = permute(w[p + "k_proj.weight"], nkv)
                tensors[b + "attn_v.weight"] = w[p + "v_proj.weight"]
                tensors[b + "attn_output.weight"] = w[p + "o_proj.weight"]
            elif p + "gate.weight" in w:
                E = cfg["n_routed_experts"]
                tensors[b + "ffn_gate_inp.weight"] = w[p + "gate.weight"]
                tensors[b + "exp_probs_b.bias"] = w[p + "gate.e_score_correction_bias"]
                for proj in ("up_proj", "down_proj"):
                    g = {"up_proj": "ffn_up_exps", "down_proj": "ffn_down_exps"}[proj]
                    tensors[b + g + ".weight"] = np.stack([w[f"{p}experts.{e}.{proj}.weight"] for e in range(E)])
                tensors[b + "ffn_up_shexp.weight"] = w[p + "shared_experts.up_proj.weight"]
                tensors[b + "ffn_down_shexp.weight"] = w[p + "shared_experts.down_proj.weight"]
            else:
                tensors[b + "ffn_up.weight"] = w[p + "up_proj.weight"]
                tensors[b + "ffn_down.weight"] = w[p + "down_proj.weight"]
    else:
        types = cfg["layer_types"]
        rp = cfg.get("rope_parameters") or {}
        kvh, kd, vh, vd = (cfg["linear_num_key_heads"], cfg["linear_key_head_dim"], cfg["linear_num_value_heads"],
                           cfg["linear_value_head_dim"])
        a("block_count", "u32", L)
        a("context_length", "u32", cfg["max_position_embeddings"])
        a("embedding_length", "u32", H)
        a("feed_forward_length", "u32", cfg["intermediate_size"])
        a("attention.head_count", "u32", nh)
        a("attention.head_count_kv", "u32", nkv)
        if arch != "qwen3next":
            a("rope.dimension_sections", "i32s", (list(rp.get("mrope_section", [11, 11, 10])) + [0, 0, 0, 0])[:4])
        a("rope.freq_base", "f32", rp.get("rope_theta", 10000.0))
        a("attention.layer_norm_rms_epsilon", "f32", cfg["rms_norm_eps"])
        moe = "num_experts" in cfg
        if moe:
            a("expert_count", "u32", cfg["num_experts"])
            a("expert_used_count", "u32", cfg["num_experts_per_tok"])
        a("attention.key_length", "u32", hd)
        a("attention.value_length", "u32", hd)
        kv("general.file_type", "u32", 0)
        if moe:
            a("expert_feed_forward_length", "u32", cfg["moe_intermediate_size"])
            a("expert_shared_feed_forward_length", "u32", cfg["shared_expert_intermediate_size"])
        a("ssm.conv_kernel", "u32", cfg["linear_conv_kernel_dim"])
        a("ssm.state_size", "u32", kd)
        a("ssm.group_count", "u32", kvh)
        a("ssm.time_step_rank", "u32", vh)
        a("ssm.inner_size", "u32", vd * vh)
        a("attention.recurrent_layers", "bools", [t == "linear_attention" for t in types])
        a("full_attention_interval", "u32", cfg.get("full_attention_interval", 4))
        a("rope.dimension_count", "u32", int(hd * rp.get("partial_rotary_factor", 0.25)))
        one = np.float32(1)
        tensors["token_embd.weight"] = w["model.embed_tokens.weight"]
        tensors["output_norm.weight"] = w["model.norm.weight"] + one
        if "lm_head.weight" in w and not cfg.get("tie_word_embeddings"):
            tensors["output.weight"] = w["lm_head.weight"]
        rep = vh // kvh
        for i in range(L):
            p, b = f"model.layers.{i}.", f"blk.{i}."
            tensors[b + "attn_norm.weight"] = w[p + "input_layernorm.weight"] + one
            tensors[b + "post_attention_norm.weight"] = w[p + "post_attention_layernorm.weight"] + one
            if types[i] == "linear_attention":
                q = p + "linear_attn."
                if arch == "qwen3next":
                    tensors[b + "ssm_a"] = -np.exp(w[q + "A_log"])
                    tensors[b + "ssm_conv1d.weight"] = w[q + "conv1d.weight"].squeeze()
                    tensors[b + "ssm_dt.bias"] = w[q + "dt_bias"]
                    tensors[b + "ssm_ba.weight"] = w[q + "in_proj_ba.weight"]
                    qkvz = w[q + "in_proj_qkvz.weight"].T.reshape(H, kvh, 2 * kd + 2 * rep * vd)
                    parts = np.split(qkvz, [kd, 2 * kd, 2 * kd + rep * vd], axis=-1)
                    flat = [x.reshape(H, -1) for x in parts]
                    tensors[b + "attn_qkv.weight"] = np.concatenate(flat[:3], axis=-1).T
                    tensors[b + "attn_gate.weight"] = flat[3].T
                    tensors[b + "ssm_out.weight"] = w[q + "out_proj.weight"]
                else:
                    qk = 2 * kvh * kd
                    tensors[b + "ssm_a"] = tile_v(-np.exp(w[q + "A_log"]), kvh, vh, 1)
                    conv = w[q + "conv1d.weight"].squeeze()
                    tensors[b + "ssm_conv1d.weight"] = np.concatenate([conv[:qk], tile_v(conv[qk:], kvh, vh, vd)])
                    tensors[b + "ssm_dt.bias"] = tile_v(w[q + "dt_bias"], kvh, vh, 1)
                    tensors[b + "ssm_beta.weight"] = tile_v(w[q + "in_proj_b.weight"], kvh, vh, 1)
                    tensors[b + "ssm_alpha.weight"] = tile_v(w[q + "in_proj_a.weight"], kvh, vh, 1)
                    qkv = w[q + "in_proj_qkv.weight"]
                    tensors[b + "attn_qkv.weight"] = np.concatenate([qkv[:qk], tile_v(qkv[qk:], kvh, vh, vd)])
                    tensors[b + "attn_gate.weight"] = tile_v(w[q + "in_proj_z.weight"], kvh, vh, vd)
                    tensors[b + "ssm_out.weight"] = tile_v(w[q + "out_proj.weight"], kvh, vh, vd, axis=1)
                tensors[b + "ssm_norm.weight"] = w[q + "norm.weight"]
            else:
                s = p + "self_attn."
                for g, h in (("attn_q", "q_proj"), ("attn_k", "k_proj"), ("attn_v", "v_proj"), ("attn_output", "o_proj")):
                    tensors[f"{b}{g}.weight"] = w[f"{s}{h}.weight"]
                tensors[b + "attn_q_norm.weight"] = w[s + "q_norm.weight"] + one
                tensors[b + "attn_k_norm.weight"] = w[s + "k_norm.weight"] + one
            m = p + "mlp."
            if m + "gate.weight" in w:
                E = cfg["num_experts"]
                tensors[b + "ffn_gate_inp.weight"] = w[m + "gate.weight"]
                for proj, g in (("gate_proj", "ffn_gate_exps"), ("up_proj", "ffn_up_exps"), ("down_proj", "ffn_down_exps")):
                    tensors[f"{b}{g}.weight"] = np.stack([w[f"{m}experts.{e}.{proj}.weight"] for e in range(E)])
                for proj, g in (("gate_proj", "ffn_gate_shexp"), ("up_proj", "ffn_up_shexp"), ("down_proj", "ffn_down_shexp")):
                    tensors[f"{b}{g}.weight"] = w[f"{m}shared_expert.{proj}.weight"]
                tensors[b + "ffn_gate_inp_shexp.weight"] = w[m + "shared_expert_gate.weight"]
            else:
                # qwen35's dense layers; qwen3next's mlp_only_layers, which llama.cpp cannot convert, use the same names.
                for proj, g in (("gate_proj", "ffn_gate"), ("up_proj", "ffn_up"), ("down_proj", "ffn_down")):
                    tensors[f"{b}{g}.weight"] = w[f"{m}{proj}.weight"]
    kv("general.quantization_version", "u32", 2)
    if tokens is not None:
        kv("tokenizer.ggml.model", "str", "gpt2")
        kv("tokenizer.ggml.pre", "str", "llama-bpe")
        kv("tokenizer.ggml.tokens", "strs", tokens)
        kv("tokenizer.ggml.token_type", "i32s", [1] * len(tokens))
        for k in ("bos", "eos", "pad"):
            if cfg.get(f"{k}_token_id") is not None:
                kv(f"tokenizer.ggml.{'padding' if k == 'pad' else k}_token_id", "u32", cfg[f"{k}_token_id"])
    if edit_meta:
        edit_meta(meta, arch)
    if edit_tensors:
        edit_tensors(tensors)
    wr = gguf.GGUFWriter(out_path, arch)
    for key, (kind, value) in meta.items():
        if kind == "u32":
            wr.add_uint32(key, value)
        elif kind == "f32":
            wr.add_float32(key, value)
        elif kind == "bool":
            wr.add_bool(key, value)
        elif kind == "str":
            wr.add_string(key, value)
        elif kind == "i32s":
            wr.add_array(key, [int(x) for x in value])
        elif kind in ("bools", "strs"):
            wr.add_array(key, list(value))
    for name, t in tensors.items():
        wr.add_tensor(name, np.ascontiguousarray(t, dtype=np.float32))
    wr.write_header_to_file()
    wr.write_kv_data_to_file()
    wr.write_tensors_to_file()
    wr.close()
    return cfg


def prepare(tmp_path, name):
    """The fixture folder with a tokenizer (the server needs one) and its GGUF twin."""
    hf = tmp_path / "hf"
    shutil.copytree(os.path.join(GOLDEN, name), hf)
    tokens = byte_level_tokens(VOCAB_TOKENS)
    write_tokenizer_json(hf, tokens)
    cfg = json.load(open(hf / "config.json"))
    if cfg["model_type"] == "nemotron_h":
        # GGUF has no Mamba2 chunk size, so it loads with transformers' default; the chunked scan's rounding follows it.
        cfg["chunk_size"] = 128
        json.dump(cfg, open(hf / "config.json", "w"))
    path = str(tmp_path / f"{name}.gguf")
    export_hybrid_gguf(str(hf), path, tokens)
    return str(hf), path, json.load(open(hf / "expected.json"))


def echo_logprobs(bin_path, model, prompt):
    from server_util import server
    with server(["--model", model, "--parallel", "1", "--threads", "2"], bin_path=bin_path) as srv:
        r = srv.post("/v1/completions", {"prompt": prompt, "max_tokens": 6, "temperature": 0.0, "echo": True,
                                         "logprobs": 20})
        assert r.status_code == 200, r.text
        lp = r.json()["choices"][0]["logprobs"]
        return lp["token_logprobs"], lp["top_logprobs"], lp["tokens"]


CASES = ["nemotron_h_moe", "nemotron_h_dense", "qwen3_next", "qwen3_5_text", "qwen3_5_moe_text"]


@pytest.mark.parametrize("name", CASES)
def test_gguf_greedy_equals_hf_folder(tensorfold_bin, tmp_path, name):
    hf, path, expected = prepare(tmp_path, name)
    compared = 0
    for case in expected["cases"]:
        n = len(case["tokens"])
        ours_hf, ours_gguf = greedy(tensorfold_bin, hf, case["prompt"], n), greedy(tensorfold_bin, path, case["prompt"], n)
        assert ours_gguf == ours_hf, f"{name}: prompt of {len(case['prompt'])}: gguf {ours_gguf} hf {ours_hf}"
        for step, (x, y) in enumerate(zip(ours_gguf, case["tokens"])):
            assert x == y, f"{name}: step {step} gguf {x} transformers {y}"
            compared += 1
            if case["steps"][step]["margin"] < 1e-3:
                break
    assert compared > 20


@pytest.mark.parametrize("name", CASES)
def test_gguf_logprobs_bit_identical(tensorfold_bin, tmp_path, name):
    hf, path, expected = prepare(tmp_path, name)
    prompt = max((c["prompt"] for c in expected["cases"]), key=len)
    want = echo_logprobs(tensorfold_bin, hf, prompt)
    got = echo_logprobs(tensorfold_bin, path, prompt)
    assert len(want[0]) == len(prompt) + 6
    assert got == want, f"{name}: logprobs differ between the GGUF and the HF folder"
    # The first generated position against transformers' first logits (a different implementation: close, not equal).
    first = expected["cases"][0]
    logits = np.array(first["first_logits"], dtype=np.float64)
    ref = logits - logits.max() - np.log(np.exp(logits - logits.max()).sum())
    _, tops, _ = echo_logprobs(tensorfold_bin, path, first["prompt"])
    top = tops[len(first["prompt"])]
    vocab = byte_level_tokens(VOCAB_TOKENS)
    # Top entries are keyed by decoded text, so byte tokens that are not whole UTF-8 collapse into one key.
    checked = [t for t in top if t in vocab]
    assert len(checked) >= 10, top
    for tok in checked:
        lp, tid = top[tok], vocab.index(tok)
        assert abs(lp - ref[tid]) < 2e-3, f"{name}: token {tid} logprob {lp} transformers {ref[tid]}"


def _fails_with(bin_path, path, *needles):
    out = subprocess.run([bin_path, "run", "--model", path, "--prompt-ids", "1,2", "--ids", "--max-tokens", "1"],
                         capture_output=True, text=True, timeout=60)
    assert out.returncode != 0, out.stdout
    for n in needles:
        assert n in out.stderr, out.stderr


def test_bad_hybrid_metadata_is_named(tensorfold_bin, tmp_path):
    hf = os.path.join(GOLDEN, "nemotron_h_moe")

    def drop_rank(meta, arch):
        del meta[f"{arch}.ssm.time_step_rank"]

    def zero_kv(meta, arch):
        kind, v = meta[f"{arch}.attention.head_count_kv"]
        meta[f"{arch}.attention.head_count_kv"] = (kind, [0] * len(v))

    def kv_on_mamba(meta, arch):
        kind, v = meta[f"{arch}.attention.head_count_kv"]
        meta[f"{arch}.attention.head_count_kv"] = (kind, [max(v)] * len(v))

    def short_kv(meta, arch):
        kind, v = meta[f"{arch}.attention.head_count_kv"]
        meta[f"{arch}.attention.head_count_kv"] = (kind, v[:-1])

    for edit, needles in ((drop_rank, ["nemotron_h_moe.ssm.time_step_rank", "is missing"]),
                          (zero_kv, ["blk.2.attn_k.weight", "head_count_kv[2] 0"]),
                          (kv_on_mamba, ["block 0", "head_count_kv is 2 but attn_q is absent"]),
                          (short_kv, ["head_count_kv", "entries"])):
        path = str(tmp_path / f"{edit.__name__}.gguf")
        export_hybrid_gguf(hf, path, edit_meta=edit)
        _fails_with(tensorfold_bin, path, path, *needles)


def test_qwen3next_interval_without_recurrent_array(tensorfold_bin, tmp_path):
    # Older converters wrote only full_attention_interval; the fixture's pattern (layer 1 full) contradicts 4.
    hf = os.path.join(GOLDEN, "qwen3_next")

    def interval_only(meta, arch):
        del meta[f"{arch}.attention.recurrent_layers"]

    path = str(tmp_path / "q.gguf")
    export_hybrid_gguf(hf, path, edit_meta=interval_only)
    _fails_with(tensorfold_bin, path, path, "full_attention_interval 4")


def test_bad_hybrid_tensors_are_named(tensorfold_bin, tmp_path):
    hf = os.path.join(GOLDEN, "qwen3_5_text")

    def positive_a(t):
        t["blk.0.ssm_a"] = np.abs(t["blk.0.ssm_a"])

    def no_gate(t):
        del t["blk.2.attn_gate.weight"]

    def short_qkv(t):
        t["blk.0.attn_qkv.weight"] = t["blk.0.attn_qkv.weight"][:-1]

    for edit, needles in ((positive_a, ["tensor 'blk.0.ssm_a'", "is not negative"]),
                          (no_gate, ["in_proj_z"]),
                          (short_qkv, ["tensor 'blk.0.attn_qkv.weight'"])):
        path = str(tmp_path / f"{edit.__name__}.gguf")
        export_hybrid_gguf(hf, path, edit_tensors=edit)
        _fails_with(tensorfold_bin, path, path, *needles)
