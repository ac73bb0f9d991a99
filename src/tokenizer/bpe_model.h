#pragma once
// Merge-rank BPE as HF tokenizers' models.BPE runs it: a priority queue of adjacent pairs
// (lowest rank first, leftmost on ties), byte fallback, unknown token, per-word cache.
#include <array>
#include <cstdint>
#include <mutex>
#include <shared_mutex>
#include <string>
#include <unordered_map>
#include <utility>
#include <vector>

namespace tf {

struct BpeOptions {
  bool ignore_merges = false;
  bool byte_fallback = false;
  bool fuse_unk = false;
  std::string unk_token;  // empty when none
  std::string continuing_subword_prefix;
  std::string end_of_word_suffix;
};

class BpeModel {
 public:
  // Merges whose parts or result are not in the vocabulary are skipped.
  BpeModel(std::unordered_map<std::string, int32_t> vocab,
           const std::vector<std::pair<std::string, std::string>>& merges, BpeOptions opt);

  // Appends the ids of one pre-tokenized word. Thread-safe.
  void encode_word(const std::string& word, std::vector<int32_t>& out) const;
  int32_t id(const std::string& piece) const;
  const std::unordered_map<std::string, int32_t>& vocab() const { return vocab_; }

 private:
  void merge_word(const std::string& word, std::vector<int32_t>& out) const;

  std::unordered_map<std::string, int32_t> vocab_;
  std::unordered_map<uint64_t, std::pair<int32_t, int32_t>> merges_;  // (a,b) -> (rank, id)
  BpeOptions opt_;
  int32_t unk_id_ = -1;
  int32_t byte_ids_[256];
  // The word cache in shards by hash, each with its own lock: requests tokenized at once on
  // several threads mostly miss on distinct words, and one lock taken per word serialized them.
  struct alignas(64) CacheShard {
    std::shared_mutex mu;
    std::unordered_map<std::string, std::vector<int32_t>> words;
  };
  static constexpr size_t kCacheShards = 64;
  mutable std::array<CacheShard, kCacheShards> cache_;
};

}  // namespace tf
