#!/usr/bin/env python3
"""Builds the training corpus from Debian packages, trains the tokenizer and writes token ids.

Sources (installed with apt-get when missing; --no-install to skip that):
  fortunes        BSD-style licence (fortune-mod), /usr/share/games/fortunes/*
  bible-kjv-text  King James Version, public domain text, read through the `bible` program (bible-kjv)
  dict-gcide      GNU Collaborative International Dictionary of English, GPL-2+ (/usr/share/dictd/gcide.dict.dz)

Outputs (both folders are git-ignored):
  work/train.jsonl, work/heldout.jsonl   cleaned documents, one {"source", "text"} a line
  data/tokenizer.json, data/tokenizer_config.json
  data/train.npy, data/val.npy           uint16 token ids: each document is BOS + text + EOS
  data/heldout.txt                       held-out documents joined by blank lines (perplexity checks)
  data/heldout_sample.txt                the first few KB of it, committed next to each model
  data/meta.json                         sizes, special ids, licences, package versions

    python3 scripts/train/prepare_corpus.py
"""
import argparse
import gzip
import json
import os
import random
import re
import subprocess
import sys

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import train_tokenizer  # noqa: E402

HERE = os.path.dirname(os.path.abspath(__file__))
PACKAGES = ["fortunes", "bible-kjv", "bible-kjv-text", "dict-gcide"]
LICENSES = {
    "fortunes": "fortune-mod data files, BSD licence (see /usr/share/doc/fortunes/copyright)",
    "bible-kjv-text": "King James Version (1611) text, public domain; packaging GPL-2+ "
                      "(see /usr/share/doc/bible-kjv-text/copyright)",
    "dict-gcide": "GNU Collaborative International Dictionary of English, GPL-2 or later "
                  "(see /usr/share/doc/dict-gcide/copyright)",
}
FORTUNE_DIR = "/usr/share/games/fortunes"
GCIDE = "/usr/share/dictd/gcide.dict.dz"
SOURCE_TAG = re.compile(r"^\s*\[[^\]]*\]\s*$")
VERSE = re.compile(r"^(\d?[A-Za-z]+)(\d+):(\d+) (.*)$")


def ensure_packages(install):
    missing = [p for p in PACKAGES
               if subprocess.run(["dpkg", "-s", p], capture_output=True).returncode != 0]
    if missing and install:
        subprocess.run(["apt-get", "install", "-y", *missing], check=True,
                       env={**os.environ, "DEBIAN_FRONTEND": "noninteractive"})
    elif missing:
        raise SystemExit(f"missing Debian packages: {' '.join(missing)} (apt-get install them)")


def package_version(p):
    r = subprocess.run(["dpkg-query", "-W", "-f=${Version}", p], capture_output=True, text=True)
    return r.stdout.strip()


def fortunes():
    names = sorted(f for f in os.listdir(FORTUNE_DIR)
                   if "." not in f and os.path.isfile(os.path.join(FORTUNE_DIR, f)))
    for name in names:
        text = open(os.path.join(FORTUNE_DIR, name), encoding="utf-8", errors="replace").read()
        for chunk in re.split(r"^%\s*$", text, flags=re.M):
            chunk = chunk.strip("\n").rstrip()
            if chunk.strip():
                yield chunk


def kjv():
    out = subprocess.run(["bible", "-f", "gen1:1-rev22:21"], capture_output=True, text=True, check=True).stdout
    chapter, verses = None, []
    for line in out.splitlines():
        m = VERSE.match(line)
        if not m:
            continue
        key = (m.group(1), m.group(2))
        if key != chapter and verses:
            yield "\n".join(verses)
            verses = []
        chapter = key
        verses.append(m.group(4).strip())
    if verses:
        yield "\n".join(verses)


def gcide():
    with gzip.open(GCIDE, "rt", encoding="utf-8", errors="replace") as f:
        lines = f.read().splitlines()
    entry, prev_blank = [], True
    def flush():
        text = "\n".join(entry).strip("\n")
        text = re.sub(r"\n{3,}", "\n\n", text)
        return text if text and not text.startswith("00-database") else None
    for line in lines:
        line = line.rstrip()
        if SOURCE_TAG.match(line):
            continue  # "[1913 Webster]" provenance tags carry no language
        if line and not line[0].isspace() and prev_blank and entry:
            t = flush()
            if t:
                yield t
            entry = []
        entry.append(line)
        prev_blank = not line
    if entry and flush():
        yield flush()


def write_jsonl(path, docs):
    with open(path, "w", encoding="utf-8") as f:
        for src, text in docs:
            f.write(json.dumps({"source": src, "text": text}, ensure_ascii=False) + "\n")


def encode(tok, docs, eos):
    ids = []
    encs = tok.encode_batch([t for _, t in docs])
    for e in encs:
        ids.extend(e.ids)
        ids.append(eos)
    return np.asarray(ids, dtype=np.uint16)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--vocab", type=int, default=8192)
    ap.add_argument("--heldout-every", type=int, default=100, help="every Nth shuffled document is held out")
    ap.add_argument("--seed", type=int, default=1234)
    ap.add_argument("--sample-chars", type=int, default=6000)
    ap.add_argument("--no-install", action="store_true")
    a = ap.parse_args()
    ensure_packages(not a.no_install)
    work, data = os.path.join(HERE, "work"), os.path.join(HERE, "data")
    os.makedirs(work, exist_ok=True)
    os.makedirs(data, exist_ok=True)

    docs = [("fortunes", t) for t in fortunes()] + [("bible-kjv-text", t) for t in kjv()] + \
           [("dict-gcide", t) for t in gcide()]
    random.Random(a.seed).shuffle(docs)
    held = [d for i, d in enumerate(docs) if i % a.heldout_every == 0]
    train = [d for i, d in enumerate(docs) if i % a.heldout_every != 0]
    write_jsonl(os.path.join(work, "train.jsonl"), train)
    write_jsonl(os.path.join(work, "heldout.jsonl"), held)

    tok = train_tokenizer.train((t for _, t in train), a.vocab)
    train_tokenizer.save(tok, data)
    sp = train_tokenizer.special_ids(tok)
    tr, va = encode(tok, train, sp["eos"]), encode(tok, held, sp["eos"])
    np.save(os.path.join(data, "train.npy"), tr)
    np.save(os.path.join(data, "val.npy"), va)

    heldout_text = "\n\n".join(t for _, t in held) + "\n"
    open(os.path.join(data, "heldout.txt"), "w", encoding="utf-8").write(heldout_text)
    sample, n = [], 0
    for _, t in held:
        if n + len(t) > a.sample_chars and sample:
            break
        sample.append(t)
        n += len(t) + 2
    open(os.path.join(data, "heldout_sample.txt"), "w", encoding="utf-8").write("\n\n".join(sample) + "\n")

    per_source = {}
    for split, ds in (("train", train), ("heldout", held)):
        for src, t in ds:
            s = per_source.setdefault(src, {"train_docs": 0, "heldout_docs": 0, "chars": 0})
            s[split + "_docs"] += 1
            s["chars"] += len(t)
    meta = {"vocab_size": tok.get_vocab_size(), "special_ids": sp, "train_tokens": int(tr.size),
            "val_tokens": int(va.size), "documents": len(docs), "sources": per_source,
            "licenses": LICENSES, "packages": {p: package_version(p) for p in PACKAGES},
            "heldout_every": a.heldout_every, "seed": a.seed}
    json.dump(meta, open(os.path.join(data, "meta.json"), "w"), indent=2)
    print(json.dumps({k: meta[k] for k in ("vocab_size", "train_tokens", "val_tokens", "documents", "sources")}, indent=1))


if __name__ == "__main__":
    main()
