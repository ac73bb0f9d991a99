#pragma once
// Full KV pages of finished prompts, indexed in a radix tree keyed by the tokens each page
// holds. Node keys chain hashes (parent hash, page tokens; the root is seeded per tenant salt)
// and every hit re-checks the tokens and the salt, so a forced hash collision can never return
// another prompt's pages. The store holds one reference on each cached page; a page whose only
// reference is the store's is "kept" and may be evicted, least recently used first, to host
// memory (when a host budget is set) or back to the pool.
//
// Rule for callers: pages returned by match() are referenced for the caller; release them
// through the PagePool when done. Nothing else protects a page from eviction.
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <unordered_map>
#include <vector>

#include "engine/page_pool.h"

namespace tf {

class KvStorage;
class Backend;

using PageHash = std::function<uint64_t(uint64_t parent, const int32_t* tokens, int n)>;

struct PrefixStats {
  uint64_t entries = 0;      // nodes in the tree
  uint64_t device_pages = 0; // pages the store holds in the pool
  uint64_t kept_pages = 0;   // of those, pages no lane uses
  uint64_t host_entries = 0; // pages copied out to host memory
  uint64_t host_bytes = 0;
  uint64_t hits = 0, hit_tokens = 0, lookups = 0;
  uint64_t evictions = 0, host_evictions = 0, restores = 0;
  uint64_t states = 0, state_bytes = 0;  // recurrent-state snapshots held (host memory)
};

// A recurrent-state snapshot at a chunk-grid mark, shared by the store and the lanes restoring it.
using StateSnapshot = std::shared_ptr<const std::vector<float>>;

class PrefixStore {
 public:
  // backend and kv may be null: then nothing goes to host memory.
  PrefixStore(PagePool& pool, int page_size, uint64_t seed, Backend* backend = nullptr, KvStorage* kv = nullptr);
  ~PrefixStore();
  PrefixStore(const PrefixStore&) = delete;
  PrefixStore& operator=(const PrefixStore&) = delete;

  void set_hash_for_test(PageHash h) { hash_ = std::move(h); }
  // Most kept pages (held by the store alone) in the pool; 0: no cache at all.
  void set_device_cap(int pages) { device_cap_ = pages; }
  void set_host_budget(uint64_t bytes) { host_budget_ = bytes; }
  uint64_t page_bytes() const;

  // Longest run of cached pages that matches tokens[0, max_pages * page_size), restoring pages
  // from host memory into free pool pages as it walks. The pages come back referenced.
  std::vector<int32_t> match(const std::string& salt, const std::vector<int32_t>& tokens, int max_pages);
  // As match, for models with recurrent layers: the run is cut back to the deepest matched page
  // that carries a state snapshot (returned in state; null and no pages when none does).
  std::vector<int32_t> match_state(const std::string& salt, const std::vector<int32_t>& tokens, int max_pages,
                                   StateSnapshot& state);
  // Attaches the recurrent state after tokens[0, pages * page_size) to that cached page (which
  // insert made); snapshots beyond the state budget go, least recently used first.
  void attach_state(const std::string& salt, const std::vector<int32_t>& tokens, int pages, StateSnapshot state);
  void set_state_budget(uint64_t bytes) { state_budget_ = bytes; }
  // Whether a snapshot of this many bytes could be kept at all (cache on, within the budget).
  bool keeps_states_of(uint64_t bytes) const { return device_cap_ > 0 && bytes <= state_budget_; }
  // Caches the full pages of a sequence: pages[i] holds tokens [i*page, (i+1)*page).
  void insert(const std::string& salt, const std::vector<int32_t>& tokens, const std::vector<int32_t>& pages,
              int full_pages);
  // Frees kept pages (least recently used leaves first) until the pool has `free_target` free
  // pages or nothing more can go; returns how many pages were freed.
  int evict_until_free(int free_target);
  // Evicts kept pages beyond the cap; call after the lanes that inserted released their pages.
  void trim();
  // Kept pages the store could give back right now.
  int evictable_pages() const;
  void clear();
  PrefixStats stats() const;
  // Invariant: every node's page is referenced by the store; kept + used + free == total.
  bool check() const;

 private:
  struct Node;
  Node* child(Node* parent, uint64_t h, const int32_t* tokens) const;
  Node* salt_root(const std::string& salt) const;
  std::vector<int32_t> match_nodes(const std::string& salt, const std::vector<int32_t>& tokens, int max_pages,
                                   std::vector<Node*>* nodes);
  // The least recently used node for which fits is true (the first found of equals), or null.
  Node* least_recent(const std::function<bool(const Node&)>& fits) const;
  void drop_state(Node* n);
  void enforce_state_budget(const Node* keep);
  bool evict_one();
  void drop(Node* n);
  void release_page(Node* n);
  void enforce_host_budget();
  uint64_t salt_root_hash(const std::string& salt) const;

  PagePool& pool_;
  int page_size_;
  uint64_t seed_;
  Backend* backend_;
  KvStorage* kv_;
  PageHash hash_;
  int device_cap_ = 0;
  uint64_t host_budget_ = 0;
  uint64_t state_budget_ = 0;
  std::unique_ptr<Node> root_;
  uint64_t tick_ = 0;
  PrefixStats stats_;
};

}  // namespace tf
