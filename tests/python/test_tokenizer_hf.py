"""Byte-level and Metaspace BPE tokenizers built with HF `tokenizers`, configured like real model
families, must give the same ids and decoded text through `tensorfold tokenize` as in HF."""
import json
import random
import subprocess

import pytest

tokenizers = pytest.importorskip("tokenizers")
from tokenizers import Tokenizer, decoders, models, normalizers, pre_tokenizers, trainers  # noqa: E402

LLAMA3_RE = (r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n]*"
             r"|\s*[\r\n]+|\s+(?!\S)|\s+")
QWEN2_RE = (r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n]*"
            r"|\s*[\r\n]+|\s+(?!\S)|\s+")


def training_corpus():
    rng = random.Random(0)
    words = ("the of and to in is you that it he was for on are as with his they at be this have from or one "
             "had by word but not what all were we when your can said there use an each which she do how their "
             "if will up other about out many then them these so some her would make like him into time has look "
             "Hello World Python tokenizer model token merge byte unicode").split()
    code = ["def main():\n    print('hi')\n", "for (int i = 0; i < n; ++i) { x[i] = i * 2; }\n",
            "import numpy as np\nnp.zeros((3, 4))\n", "<div class=\"a\">text</div>\n"]
    intl = ["日本語のテキストです。", "中文文本，汉字很多。", "한국어 텍스트", "مرحبا بالعالم", "Привет, как дела?",
            "naïve café déjà vu", "Ελληνικά", "😀 👍 🎉", "1234 5678 90", "It's we've they'll I'm"]
    lines = []
    for _ in range(4000):
        lines.append(" ".join(rng.choice(words) for _ in range(rng.randint(3, 15))) + rng.choice([".", ",", "!", "?", "\n"]))
        if rng.random() < 0.2:
            lines.append(rng.choice(code))
        if rng.random() < 0.3:
            lines.append(rng.choice(intl))
    return lines


def save(tmp_path, name, tj, tokenizer_config=None):
    d = tmp_path / name
    d.mkdir()
    (d / "tokenizer.json").write_text(json.dumps(tj), encoding="utf-8")
    (d / "config.json").write_text(json.dumps({"model_type": name}))
    if tokenizer_config is not None:
        (d / "tokenizer_config.json").write_text(json.dumps(tokenizer_config))
    return d, Tokenizer.from_file(str(d / "tokenizer.json"))


def train_byte_level(pre, normalizer, specials):
    tok = Tokenizer(models.BPE())
    if normalizer is not None:
        tok.normalizer = normalizer
    tok.pre_tokenizer = pre
    tok.decoder = decoders.ByteLevel()
    tr = trainers.BpeTrainer(vocab_size=3000, initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
                             special_tokens=specials, show_progress=False)
    tok.train_from_iterator(training_corpus(), tr)
    return json.loads(tok.to_str())


def make_gpt2(tmp_path):
    tj = train_byte_level(pre_tokenizers.ByteLevel(add_prefix_space=False), None, ["<|endoftext|>"])
    return save(tmp_path, "gpt2", tj)


def make_llama3(tmp_path):
    pre = pre_tokenizers.Sequence([
        pre_tokenizers.Split(tokenizers.Regex(LLAMA3_RE), behavior="isolated", invert=False),
        pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=False)])
    tj = train_byte_level(pre, None, ["<|begin_of_text|>", "<|end_of_text|>", "<|eot_id|>"])
    tj["model"]["ignore_merges"] = True
    bos = tj["model"]["vocab"].get("<|begin_of_text|>")
    tj["post_processor"] = {"type": "Sequence", "processors": [
        {"type": "ByteLevel", "add_prefix_space": True, "trim_offsets": False, "use_regex": True},
        {"type": "TemplateProcessing",
         "single": [{"SpecialToken": {"id": "<|begin_of_text|>", "type_id": 0}}, {"Sequence": {"id": "A", "type_id": 0}}],
         "pair": [{"SpecialToken": {"id": "<|begin_of_text|>", "type_id": 0}}, {"Sequence": {"id": "A", "type_id": 0}},
                  {"SpecialToken": {"id": "<|begin_of_text|>", "type_id": 1}}, {"Sequence": {"id": "B", "type_id": 1}}],
         "special_tokens": {"<|begin_of_text|>": {"id": "<|begin_of_text|>", "ids": [bos], "tokens": ["<|begin_of_text|>"]}}}]}
    cfg = {"bos_token": "<|begin_of_text|>", "eos_token": {"content": "<|eot_id|>"}}
    return save(tmp_path, "llama3", tj, cfg)


def make_qwen2(tmp_path):
    pre = pre_tokenizers.Sequence([
        pre_tokenizers.Split(tokenizers.Regex(QWEN2_RE), behavior="isolated", invert=False),
        pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=False)])
    tj = train_byte_level(pre, normalizers.NFC(), ["<|endoftext|>", "<|im_start|>", "<|im_end|>"])
    return save(tmp_path, "qwen2", tj)


def train_metaspace():
    tok = Tokenizer(models.BPE(unk_token="<unk>", byte_fallback=True))
    tok.pre_tokenizer = pre_tokenizers.Metaspace(replacement="\u2581", prepend_scheme="first")
    tr = trainers.BpeTrainer(vocab_size=3000, special_tokens=[], show_progress=False, limit_alphabet=400)
    tok.train_from_iterator(training_corpus(), tr)
    tj = json.loads(tok.to_str())
    # Sentencepiece layout: <unk>, <s>, </s>, the 256 byte tokens, then the learned pieces.
    learned = sorted(tj["model"]["vocab"].items(), key=lambda kv: kv[1])
    vocab = {"<unk>": 0, "<s>": 1, "</s>": 2}
    for b in range(256):
        vocab[f"<0x{b:02X}>"] = len(vocab)
    for piece, _ in learned:
        vocab.setdefault(piece, len(vocab))
    tj["model"]["vocab"] = vocab
    tj["added_tokens"] = [
        {"id": i, "content": c, "single_word": False, "lstrip": False, "rstrip": False, "normalized": False, "special": True}
        for i, c in enumerate(["<unk>", "<s>", "</s>"])]
    tj["post_processor"] = {
        "type": "TemplateProcessing",
        "single": [{"SpecialToken": {"id": "<s>", "type_id": 0}}, {"Sequence": {"id": "A", "type_id": 0}}],
        "pair": [{"Sequence": {"id": "A", "type_id": 0}}, {"Sequence": {"id": "B", "type_id": 1}}],
        "special_tokens": {"<s>": {"id": "<s>", "ids": [1], "tokens": ["<s>"]}}}
    return tj


def make_llama2(tmp_path):
    tj = train_metaspace()
    tj["normalizer"] = {"type": "Sequence", "normalizers": [
        {"type": "Prepend", "prepend": "\u2581"},
        {"type": "Replace", "pattern": {"String": " "}, "content": "\u2581"}]}
    tj["pre_tokenizer"] = None
    tj["decoder"] = {"type": "Sequence", "decoders": [
        {"type": "Replace", "pattern": {"String": "\u2581"}, "content": " "},
        {"type": "ByteFallback"}, {"type": "Fuse"}, {"type": "Strip", "content": " ", "start": 1, "stop": 0}]}
    return save(tmp_path, "llama2", tj, {"bos_token": "<s>", "eos_token": "</s>", "add_bos_token": True})


def make_metaspace(tmp_path):
    tj = train_metaspace()
    tj["normalizer"] = None
    tj["pre_tokenizer"] = {"type": "Metaspace", "replacement": "\u2581", "prepend_scheme": "first", "split": False}
    tj["decoder"] = {"type": "Sequence", "decoders": [
        {"type": "ByteFallback"}, {"type": "Metaspace", "replacement": "\u2581", "prepend_scheme": "first", "split": False}]}
    return save(tmp_path, "metaspace", tj)


FAMILIES = {"gpt2": make_gpt2, "llama3": make_llama3, "qwen2": make_qwen2, "llama2": make_llama2,
            "metaspace": make_metaspace}


def run_jsonl(binary, model_dir, values, extra=()):
    inp = "".join(json.dumps(v) + "\n" for v in values)
    r = subprocess.run([binary, "tokenize", "--model", str(model_dir), "--jsonl", *extra], input=inp.encode(),
                       capture_output=True, timeout=120)
    assert r.returncode == 0, r.stderr.decode(errors="replace")
    out = [json.loads(line) for line in r.stdout.decode().split("\n")[:-1]]
    assert len(out) == len(values)
    return out


@pytest.mark.parametrize("family", sorted(FAMILIES))
def test_ids_and_decode_match_hf(tmp_path, tensorfold_bin, hard_strings, family):
    model_dir, hf = FAMILIES[family](tmp_path)
    ours = run_jsonl(tensorfold_bin, model_dir, hard_strings)
    want = [hf.encode(s).ids for s in hard_strings]
    bad = [(s, o, w) for s, o, w in zip(hard_strings, ours, want) if o != w]
    for s, o, w in bad:
        print(f"[{family}] MISMATCH {s[:80]!r}\n  ours={o[:40]}\n  hf  ={w[:40]}")
    assert not bad, f"{len(bad)} of {len(hard_strings)} strings differ from HF"

    decoded = run_jsonl(tensorfold_bin, model_dir, want)
    want_text = [hf.decode(ids, skip_special_tokens=False) for ids in want]
    bad = [(s, o, w) for s, o, w in zip(hard_strings, decoded, want_text) if o != w]
    for s, o, w in bad:
        print(f"[{family}] DECODE MISMATCH {s[:60]!r}\n  ours={o[:80]!r}\n  hf  ={w[:80]!r}")
    assert not bad, f"{len(bad)} decodes differ from HF"


def test_cli_text_file_and_pieces(tmp_path, tensorfold_bin):
    model_dir, hf = make_llama3(tmp_path)
    text = "Hello world, it's 2024!\n"
    want = hf.encode(text).ids
    r = subprocess.run([tensorfold_bin, "tokenize", "--model", str(model_dir), "--text", text],
                       capture_output=True, text=True, check=True)
    assert r.stdout.strip() == ",".join(map(str, want))
    f = tmp_path / "in.txt"
    f.write_text(text, encoding="utf-8")
    r = subprocess.run([tensorfold_bin, "tokenize", "--model", str(model_dir), "--file", str(f), "--pieces"],
                       capture_output=True, text=True, check=True)
    lines = r.stdout.splitlines()
    assert [int(line.split("\t")[0]) for line in lines] == want
    assert lines[0].split("\t")[1] == "<|begin_of_text|>"
    r = subprocess.run([tensorfold_bin, "tokenize", "--model", str(model_dir), "--text", "-", "--no-special"],
                       input=text, capture_output=True, text=True, check=True)
    assert r.stdout.strip() == ",".join(map(str, hf.encode(text, add_special_tokens=False).ids))


def test_cli_bad_model_is_an_error(tmp_path, tensorfold_bin):
    (tmp_path / "tokenizer.json").write_text('{"model": {"type": "BPE", "vocab": {"a": -5}, "merges": []}}')
    r = subprocess.run([tensorfold_bin, "tokenize", "--model", str(tmp_path), "--text", "a"],
                       capture_output=True, text=True)
    assert r.returncode != 0
    assert "tokenizer.json" in r.stderr and "vocab" in r.stderr


def test_gguf_gpt2_vocab_matches_hf(tmp_path, tensorfold_bin, hard_strings):
    """A Llama-3 style vocabulary stored in GGUF (tokenizer.ggml.model gpt2, pre llama-bpe)."""
    gguf = pytest.importorskip("gguf")
    _, hf = make_llama3(tmp_path)
    tj = json.loads(hf.to_str())
    size = max([t["id"] for t in tj["added_tokens"]] + list(tj["model"]["vocab"].values())) + 1
    tokens, types = [""] * size, [1] * size
    for piece, i in tj["model"]["vocab"].items():
        tokens[i] = piece
    for t in tj["added_tokens"]:
        tokens[t["id"]], types[t["id"]] = t["content"], 3
    merges = [" ".join(m) if isinstance(m, list) else m for m in tj["model"]["merges"]]
    path = tmp_path / "llama3.gguf"
    w = gguf.GGUFWriter(str(path), "llama")
    w.add_tokenizer_model("gpt2")
    w.add_tokenizer_pre("llama-bpe")
    w.add_token_list(tokens)
    w.add_token_types(types)
    w.add_token_merges(merges)
    w.add_bos_token_id(tokens.index("<|begin_of_text|>"))
    w.add_add_bos_token(True)
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()
    ours = run_jsonl(tensorfold_bin, path, hard_strings)
    want = [hf.encode(s).ids for s in hard_strings]
    bad = [(s, o, w) for s, o, w in zip(hard_strings, ours, want) if o != w]
    for s, o, w in bad:
        print(f"[gguf] MISMATCH {s[:80]!r}\n  ours={o[:40]}\n  hf  ={w[:40]}")
    assert not bad, f"{len(bad)} of {len(hard_strings)} strings differ from HF"
