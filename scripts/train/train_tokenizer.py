#!/usr/bin/env python3
"""Trains the byte-level BPE tokenizer on the training documents and writes tokenizer.json and
tokenizer_config.json (special tokens, ChatML chat template) into a folder.

    python3 scripts/train/train_tokenizer.py --docs scripts/train/work/train.jsonl --vocab 8192 --out scripts/train/data
"""
import argparse
import json
import os

from tokenizers import Regex, Tokenizer, decoders, models, pre_tokenizers, processors, trainers

LLAMA3_SPLIT = (r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n]*"
                r"|\s*[\r\n]+|\s+(?!\S)|\s+")
SPECIAL = ["<|begin_of_text|>", "<|end_of_text|>", "<|im_start|>", "<|im_end|>"]
CHAT_TEMPLATE = ("{{ bos_token }}{% for message in messages %}{{ '<|im_start|>' + message['role'] + '\\n' + "
                 "message['content'] + '<|im_end|>' + '\\n' }}{% endfor %}"
                 "{% if add_generation_prompt %}{{ '<|im_start|>assistant\\n' }}{% endif %}")
MODEL_MAX_LENGTH = 4096


def read_docs(path):
    with open(path, encoding="utf-8") as f:
        for line in f:
            yield json.loads(line)["text"]


def train(doc_iter, vocab):
    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.Sequence([
        pre_tokenizers.Split(Regex(LLAMA3_SPLIT), behavior="isolated"),
        pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=False)])
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(vocab_size=vocab, special_tokens=SPECIAL,
                                  initial_alphabet=pre_tokenizers.ByteLevel.alphabet(), show_progress=False)
    tok.train_from_iterator(doc_iter, trainer)
    bos = tok.token_to_id(SPECIAL[0])
    tok.post_processor = processors.TemplateProcessing(
        single=f"{SPECIAL[0]} $A", pair=f"{SPECIAL[0]} $A {SPECIAL[0]} $B", special_tokens=[(SPECIAL[0], bos)])
    return tok


def save(tok, out):
    os.makedirs(out, exist_ok=True)
    tok.save(os.path.join(out, "tokenizer.json"))
    cfg = {"bos_token": SPECIAL[0], "eos_token": SPECIAL[1], "add_bos_token": True,
           "additional_special_tokens": SPECIAL[2:], "chat_template": CHAT_TEMPLATE,
           "model_max_length": MODEL_MAX_LENGTH, "tokenizer_class": "PreTrainedTokenizerFast"}
    with open(os.path.join(out, "tokenizer_config.json"), "w") as f:
        json.dump(cfg, f, indent=2)


def special_ids(tok):
    return {name: tok.token_to_id(t) for name, t in zip(["bos", "eos", "im_start", "im_end"], SPECIAL)}


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--docs", required=True, help="JSONL file, one {\"text\": ...} a line")
    ap.add_argument("--vocab", type=int, default=8192)
    ap.add_argument("--out", required=True)
    a = ap.parse_args()
    save(train(read_docs(a.docs), a.vocab), a.out)


if __name__ == "__main__":
    main()
