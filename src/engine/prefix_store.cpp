#include "engine/prefix_store.h"

#include <algorithm>
#include <cstring>
#include <map>

#include "backend/backend.h"
#include "base/error.h"

namespace tf {

struct PrefixStore::Node {
  Node* parent = nullptr;
  uint64_t hash = 0;
  std::string salt;
  std::vector<int32_t> tokens;
  int32_t page = -1;        // pool page, or -1 while the contents live in host memory
  std::vector<uint8_t> host;  // contents while in host memory (Backend::kv_page_bytes)
  uint64_t last_used = 0;
  StateSnapshot state;      // recurrent state after this page, when it ends on a chunk-grid mark
  std::unordered_multimap<uint64_t, std::unique_ptr<Node>> children;
};

namespace {

uint64_t mix64(uint64_t x) {
  x ^= x >> 30;
  x *= 0xbf58476d1ce4e5b9ull;
  x ^= x >> 27;
  x *= 0x94d049bb133111ebull;
  x ^= x >> 31;
  return x;
}

uint64_t default_hash(uint64_t parent, const int32_t* tokens, int n) {
  uint64_t h = mix64(parent + 0x9e3779b97f4a7c15ull);
  for (int i = 0; i < n; ++i) h = mix64(h ^ static_cast<uint32_t>(tokens[i]));
  return h;
}

}  // namespace

PrefixStore::PrefixStore(PagePool& pool, int page_size, uint64_t seed, Backend* backend, KvStorage* kv)
    : pool_(pool), page_size_(page_size), seed_(seed), backend_(backend), kv_(kv), hash_(default_hash),
      root_(std::make_unique<Node>()) {}

PrefixStore::~PrefixStore() { clear(); }

uint64_t PrefixStore::page_bytes() const {
  return kv_ ? kv_->bytes() / static_cast<uint64_t>(std::max(1, kv_->pages)) : 0;
}

uint64_t PrefixStore::salt_root_hash(const std::string& salt) const {
  uint64_t h = mix64(seed_);
  for (unsigned char c : salt) h = mix64(h ^ c);
  return h;
}

PrefixStore::Node* PrefixStore::child(Node* parent, uint64_t h, const int32_t* tokens) const {
  auto range = parent->children.equal_range(h);
  for (auto it = range.first; it != range.second; ++it) {
    Node* n = it->second.get();
    if (std::memcmp(n->tokens.data(), tokens, sizeof(int32_t) * static_cast<size_t>(page_size_)) == 0) return n;
  }
  return nullptr;
}

PrefixStore::Node* PrefixStore::salt_root(const std::string& salt) const {
  auto range = root_->children.equal_range(salt_root_hash(salt));
  for (auto it = range.first; it != range.second; ++it)
    if (it->second->salt == salt) return it->second.get();
  return nullptr;
}

std::vector<int32_t> PrefixStore::match(const std::string& salt, const std::vector<int32_t>& tokens, int max_pages) {
  return match_nodes(salt, tokens, max_pages, nullptr);
}

std::vector<int32_t> PrefixStore::match_state(const std::string& salt, const std::vector<int32_t>& tokens,
                                              int max_pages, StateSnapshot& state) {
  std::vector<Node*> nodes;
  std::vector<int32_t> out = match_nodes(salt, tokens, max_pages, &nodes);
  size_t keep = 0;
  state.reset();
  for (size_t i = 0; i < nodes.size(); ++i)
    if (nodes[i]->state) {
      keep = i + 1;
      state = nodes[i]->state;
    }
  if (keep < out.size()) {
    stats_.hit_tokens -= (out.size() - keep) * static_cast<size_t>(page_size_);
    if (keep == 0) stats_.hits--;
  }
  while (out.size() > keep) {
    pool_.unref(out.back());
    out.pop_back();
  }
  return out;
}

void PrefixStore::attach_state(const std::string& salt, const std::vector<int32_t>& tokens, int pages,
                               StateSnapshot state) {
  if (device_cap_ <= 0 || !state || pages <= 0 || static_cast<size_t>(pages) * page_size_ > tokens.size()) return;
  Node* n = salt_root(salt);
  for (int i = 0; n && i < pages; ++i) {
    const int32_t* tk = tokens.data() + static_cast<size_t>(i) * page_size_;
    n = child(n, hash_(n->hash, tk, page_size_), tk);
  }
  if (!n || n->state) return;
  const uint64_t bytes = state->size() * sizeof(float);
  if (bytes > state_budget_) return;
  n->state = std::move(state);
  stats_.states++;
  stats_.state_bytes += bytes;
  enforce_state_budget(n);
}

void PrefixStore::drop_state(Node* n) {
  if (!n->state) return;
  stats_.states--;
  stats_.state_bytes -= n->state->size() * sizeof(float);
  n->state.reset();
}

PrefixStore::Node* PrefixStore::least_recent(const std::function<bool(const Node&)>& fits) const {
  Node* best = nullptr;
  std::vector<Node*> stack = {root_.get()};
  while (!stack.empty()) {
    Node* n = stack.back();
    stack.pop_back();
    for (auto& [h, c] : n->children) stack.push_back(c.get());
    if (fits(*n) && (!best || n->last_used < best->last_used)) best = n;
  }
  return best;
}

void PrefixStore::enforce_state_budget(const Node* keep) {
  while (stats_.state_bytes > state_budget_) {
    Node* best = least_recent([&](const Node& n) { return n.state && &n != keep; });
    if (!best) break;
    drop_state(best);
  }
}

std::vector<int32_t> PrefixStore::match_nodes(const std::string& salt, const std::vector<int32_t>& tokens,
                                              int max_pages, std::vector<Node*>* nodes) {
  std::vector<int32_t> out;
  stats_.lookups++;
  if (device_cap_ <= 0) return out;
  max_pages = std::min<int>(max_pages, static_cast<int>(tokens.size()) / page_size_);
  Node* parent = salt_root(salt);
  if (!parent) return out;
  const uint64_t now = ++tick_;
  for (int i = 0; i < max_pages; ++i) {
    const int32_t* tk = tokens.data() + static_cast<size_t>(i) * page_size_;
    Node* n = child(parent, hash_(parent->hash, tk, page_size_), tk);
    if (!n) break;
    if (n->page < 0) {
      // Restore from host memory into a free page; pages already matched are referenced by us,
      // so eviction cannot take them.
      if (pool_.free_count() == 0) evict_until_free(1);
      std::vector<int32_t> p;
      if (!pool_.alloc(1, p)) break;
      backend_->kv_page_from_host(*kv_, p[0], n->host.data());
      stats_.host_bytes -= n->host.size();
      std::vector<uint8_t>().swap(n->host);
      n->page = p[0];
      pool_.set_cached(n->page, true);
      stats_.restores++;
      stats_.host_entries--;
      stats_.device_pages++;
    }
    pool_.ref(n->page);
    out.push_back(n->page);
    if (nodes) nodes->push_back(n);
    n->last_used = now;
    parent = n;
  }
  for (Node* a = parent; a && a != root_.get(); a = a->parent) a->last_used = now;
  if (!out.empty()) {
    stats_.hits++;
    stats_.hit_tokens += out.size() * static_cast<size_t>(page_size_);
  }
  return out;
}

void PrefixStore::insert(const std::string& salt, const std::vector<int32_t>& tokens, const std::vector<int32_t>& pages,
                         int full_pages) {
  if (device_cap_ <= 0) return;
  full_pages = std::min<int>({full_pages, static_cast<int>(pages.size()), static_cast<int>(tokens.size()) / page_size_});
  const uint64_t rh = salt_root_hash(salt);
  Node* parent = nullptr;
  auto range = root_->children.equal_range(rh);
  for (auto it = range.first; it != range.second; ++it)
    if (it->second->salt == salt) parent = it->second.get();
  if (!parent) {
    auto node = std::make_unique<Node>();
    node->parent = root_.get();
    node->hash = rh;
    node->salt = salt;
    parent = node.get();
    root_->children.emplace(rh, std::move(node));
  }
  const uint64_t now = ++tick_;
  for (int i = 0; i < full_pages; ++i) {
    const int32_t* tk = tokens.data() + static_cast<size_t>(i) * page_size_;
    const uint64_t h = hash_(parent->hash, tk, page_size_);
    Node* n = child(parent, h, tk);
    if (!n) {
      auto node = std::make_unique<Node>();
      node->parent = parent;
      node->hash = h;
      node->salt = salt;
      node->tokens.assign(tk, tk + page_size_);
      node->page = pages[static_cast<size_t>(i)];
      pool_.ref(node->page);
      pool_.set_cached(node->page, true);
      stats_.entries++;
      stats_.device_pages++;
      n = node.get();
      parent->children.emplace(h, std::move(node));
    } else if (n->page < 0) {
      // The host copy is stale-free but the lane's page is already on the device: adopt it.
      n->page = pages[static_cast<size_t>(i)];
      pool_.ref(n->page);
      pool_.set_cached(n->page, true);
      stats_.host_entries--;
      stats_.device_pages++;
      stats_.host_bytes -= n->host.size();
      std::vector<uint8_t>().swap(n->host);
    }
    n->last_used = now;
    parent = n;
  }
}

void PrefixStore::release_page(Node* n) {
  stats_.device_pages--;
  pool_.set_cached(n->page, false);
  pool_.unref(n->page);
  n->page = -1;
}

void PrefixStore::drop(Node* n) {
  drop_state(n);
  if (!n->tokens.empty()) stats_.entries--;
  if (n->page >= 0) release_page(n);
  else if (!n->host.empty()) stats_.host_entries--;
  stats_.host_bytes -= n->host.size();
  Node* parent = n->parent;
  auto range = parent->children.equal_range(n->hash);
  for (auto it = range.first; it != range.second; ++it)
    if (it->second.get() == n) {
      parent->children.erase(it);
      break;
    }
  // A salt root with no pages left goes too.
  if (parent != root_.get() && parent->parent == root_.get() && parent->children.empty()) drop(parent);
}

bool PrefixStore::evict_one() {
  // Least recently used page that only the store holds and that no child needs on the device.
  const bool host_tier = host_budget_ > 0 && backend_ && kv_;
  Node* best = least_recent([&](const Node& n) {
    if (n.page < 0 || pool_.refcount(n.page) != 1) return false;
    // With a host tier a page may leave while its children sit in host memory; without one only leaves go.
    if (!host_tier) return n.children.empty();
    for (auto& [h, c] : n.children)
      if (c->page >= 0) return false;
    return true;
  });
  if (!best) return false;
  stats_.evictions++;
  if (host_tier && page_bytes() <= host_budget_) {
    best->host.resize(Backend::kv_page_bytes(*kv_));
    backend_->kv_page_to_host(*kv_, best->page, best->host.data());
    stats_.host_bytes += best->host.size();
    stats_.host_entries++;
    release_page(best);
    enforce_host_budget();
  } else {
    drop(best);
  }
  return true;
}

void PrefixStore::enforce_host_budget() {
  while (stats_.host_bytes > host_budget_) {
    Node* best = least_recent([](const Node& n) { return n.page < 0 && !n.host.empty() && n.children.empty(); });
    if (!best) break;
    stats_.host_evictions++;
    drop(best);
  }
}

int PrefixStore::evict_until_free(int free_target) {
  int freed = 0;
  while (pool_.free_count() < free_target) {
    const int before = pool_.free_count();
    if (!evict_one()) break;
    freed += pool_.free_count() - before;
  }
  return freed;
}

void PrefixStore::trim() {
  while (evictable_pages() > device_cap_ && evict_one()) {
  }
}

int PrefixStore::evictable_pages() const { return pool_.kept_count(); }

void PrefixStore::clear() {
  std::vector<Node*> stack = {root_.get()};
  while (!stack.empty()) {
    Node* n = stack.back();
    stack.pop_back();
    for (auto& [h, c] : n->children) stack.push_back(c.get());
    if (n->page >= 0) release_page(n);
  }
  root_ = std::make_unique<Node>();
  stats_.host_bytes = 0;
  stats_.states = stats_.state_bytes = 0;
  stats_.entries = stats_.device_pages = stats_.host_entries = 0;
}

PrefixStats PrefixStore::stats() const {
  PrefixStats s = stats_;
  s.kept_pages = static_cast<uint64_t>(pool_.kept_count());
  return s;
}

bool PrefixStore::check() const {
  uint64_t entries = 0, device = 0, host = 0, states = 0, state_bytes = 0;
  std::vector<const Node*> stack = {root_.get()};
  while (!stack.empty()) {
    const Node* n = stack.back();
    stack.pop_back();
    for (const auto& [h, c] : n->children) {
      if (c->parent != n) return false;
      stack.push_back(c.get());
    }
    if (n->page >= 0 && (pool_.refcount(n->page) < 1 || !pool_.cached(n->page))) return false;
    if (!n->tokens.empty() && n->page < 0 && n->host.empty()) return false;
    entries += !n->tokens.empty();
    device += n->page >= 0;
    host += n->page < 0 && !n->host.empty();
    if (n->state) {
      ++states;
      state_bytes += n->state->size() * sizeof(float);
    }
  }
  return states == stats_.states && state_bytes == stats_.state_bytes && entries == stats_.entries && device == stats_.device_pages && host == stats_.host_entries &&
         pool_.census_ok();
}

}  // namespace tf
