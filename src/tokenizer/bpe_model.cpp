#include "tokenizer/bpe_model.h"

#include <cstdio>
#include <queue>

#include "base/error.h"
#include "tokenizer/utf8.h"

namespace tf {

namespace {

uint64_t pair_key(int32_t a, int32_t b) {
  return (static_cast<uint64_t>(static_cast<uint32_t>(a)) << 32) | static_cast<uint32_t>(b);
}

constexpr size_t kCacheMaxWordBytes = 256;
constexpr size_t kCacheMaxEntries = 1 << 16;

}  // namespace

BpeModel::BpeModel(std::unordered_map<std::string, int32_t> vocab,
                   const std::vector<std::pair<std::string, std::string>>& merges, BpeOptions opt)
    : vocab_(std::move(vocab)), opt_(std::move(opt)) {
  if (!opt_.unk_token.empty()) unk_id_ = id(opt_.unk_token);
  for (int b = 0; b < 256; ++b) {
    char name[8];
    std::snprintf(name, sizeof name, "<0x%02X>", b);
    byte_ids_[b] = id(name);
  }
  const size_t plen = opt_.continuing_subword_prefix.size();
  merges_.reserve(merges.size());
  for (size_t r = 0; r < merges.size(); ++r) {
    const auto& [a, b] = merges[r];
    const int32_t ia = id(a), ib = id(b);
    if (ia < 0 || ib < 0) continue;
    const std::string joined = a + (plen && b.compare(0, plen, opt_.continuing_subword_prefix) == 0
                                        ? b.substr(plen) : b);
    const int32_t ij = id(joined);
    if (ij < 0) continue;
    merges_.emplace(pair_key(ia, ib), std::make_pair(static_cast<int32_t>(r), ij));
  }
}

int32_t BpeModel::id(const std::string& piece) const {
  auto it = vocab_.find(piece);
  return it == vocab_.end() ? -1 : it->second;
}

void BpeModel::encode_word(const std::string& word, std::vector<int32_t>& out) const {
  if (word.empty()) return;
  const bool cacheable = word.size() <= kCacheMaxWordBytes;
  CacheShard& shard = cache_[std::hash<std::string>{}(word) % kCacheShards];
  if (cacheable) {
    std::shared_lock lock(shard.mu);
    auto it = shard.words.find(word);
    if (it != shard.words.end()) {
      out.insert(out.end(), it->second.begin(), it->second.end());
      return;
    }
  }
  std::vector<int32_t> ids;
  const int32_t whole = opt_.ignore_merges ? id(word) : -1;
  if (whole >= 0) ids.push_back(whole);
  else merge_word(word, ids);
  out.insert(out.end(), ids.begin(), ids.end());
  if (cacheable) {
    std::unique_lock lock(shard.mu);
    if (shard.words.size() >= kCacheMaxEntries / kCacheShards) shard.words.clear();
    shard.words.emplace(word, std::move(ids));
  }
}

void BpeModel::merge_word(const std::string& w, std::vector<int32_t>& out) const {
  struct Sym {
    int32_t id;
    int prev, next;
    bool alive;
  };
  std::vector<Sym> syms;
  syms.reserve(w.size());
  auto add = [&](int32_t id) {
    const int n = static_cast<int>(syms.size());
    syms.push_back({id, n - 1, -1, true});
    if (n > 0) syms[n - 1].next = n;
  };
  int32_t unk_pending = -1;  // a fused run of unknown characters not yet emitted
  for (size_t i = 0; i < w.size();) {
    size_t n = utf8::valid_len(w, i);
    if (!n) n = 1;
    const bool first = i == 0, last = i + n == w.size();
    std::string s = w.substr(i, n);
    i += n;
    if (!first && !opt_.continuing_subword_prefix.empty()) s = opt_.continuing_subword_prefix + s;
    if (last && !opt_.end_of_word_suffix.empty()) s += opt_.end_of_word_suffix;
    const int32_t id = this->id(s);
    if (id >= 0) {
      if (unk_pending >= 0) add(unk_pending), unk_pending = -1;
      add(id);
      continue;
    }
    if (opt_.byte_fallback) {
      bool all = true;
      for (unsigned char c : s) all = all && byte_ids_[c] >= 0;
      if (all) {
        // HF emits a pending unknown only before a vocabulary hit, so it may follow these bytes.
        for (unsigned char c : s) add(byte_ids_[c]);
        continue;
      }
    }
    if (unk_id_ >= 0) {
      if (unk_pending >= 0 && !opt_.fuse_unk) add(unk_pending);
      unk_pending = unk_id_;
    }
  }
  if (unk_pending >= 0) add(unk_pending);

  struct Cand {
    int32_t rank;
    int pos;
    int32_t new_id;
    bool operator<(const Cand& o) const {  // priority_queue pops the largest: invert
      return rank != o.rank ? rank > o.rank : pos > o.pos;
    }
  };
  std::vector<Cand> heap_init;
  auto lookup = [&](int a, int b, std::vector<Cand>& into) {
    auto it = merges_.find(pair_key(syms[a].id, syms[b].id));
    if (it != merges_.end()) into.push_back({it->second.first, a, it->second.second});
  };
  for (int k = 0; k + 1 < static_cast<int>(syms.size()); ++k) lookup(k, k + 1, heap_init);
  std::priority_queue<Cand> pq(std::less<Cand>(), std::move(heap_init));
  std::vector<Cand> fresh;
  while (!pq.empty()) {
    const Cand c = pq.top();
    pq.pop();
    Sym& left = syms[c.pos];
    if (!left.alive || left.next < 0) continue;
    Sym& right = syms[left.next];
    auto it = merges_.find(pair_key(left.id, right.id));
    if (it == merges_.end() || it->second.second != c.new_id) continue;
    left.id = c.new_id;
    right.alive = false;
    left.next = right.next;
    if (right.next >= 0) syms[right.next].prev = c.pos;
    fresh.clear();
    if (left.prev >= 0) lookup(left.prev, c.pos, fresh);
    if (left.next >= 0) lookup(c.pos, left.next, fresh);
    for (const auto& f : fresh) pq.push(f);
  }
  for (int k = syms.empty() ? -1 : 0; k >= 0; k = syms[k].next) out.push_back(syms[k].id);
}

}  // namespace tf
