#include "engine/page_pool.h"

#include "base/error.h"

namespace tf {

PagePool::PagePool(int total_pages, int page_size) : page_size_(page_size) {
  TF_CHECK(total_pages > 0 && page_size > 0, "page pool: ", total_pages, " pages of ", page_size, " positions");
  refs_.assign(static_cast<size_t>(total_pages), 0);
  cached_.assign(static_cast<size_t>(total_pages), 0);
  for (int i = total_pages - 1; i >= 0; --i) free_.push_back(i);
}

bool PagePool::alloc(int n, std::vector<int32_t>& out) {
  if (n < 0 || n > free_count()) return false;
  for (int i = 0; i < n; ++i) {
    int32_t p = free_.back();
    free_.pop_back();
    refs_[static_cast<size_t>(p)] = 1;
    out.push_back(p);
  }
  return true;
}

void PagePool::update_kept(int32_t page, int before, int after) {
  if (!cached_[static_cast<size_t>(page)]) return;
  kept_ += (after == 1) - (before == 1);
}

void PagePool::ref(int32_t page) {
  TF_CHECK(page >= 0 && page < total() && refs_[static_cast<size_t>(page)] > 0, "page pool: ref of free page ", page);
  int& r = refs_[static_cast<size_t>(page)];
  update_kept(page, r, r + 1);
  ++r;
}

void PagePool::unref(int32_t page) {
  TF_CHECK(page >= 0 && page < total() && refs_[static_cast<size_t>(page)] > 0, "page pool: unref of free page ", page);
  int& r = refs_[static_cast<size_t>(page)];
  update_kept(page, r, r - 1);
  if (--r == 0) {
    TF_CHECK(!cached_[static_cast<size_t>(page)], "page pool: cached page ", page, " lost its last reference");
    free_.push_back(page);
  }
}

void PagePool::set_cached(int32_t page, bool cached) {
  TF_CHECK(page >= 0 && page < total() && refs_[static_cast<size_t>(page)] > 0, "page pool: caching free page ", page);
  uint8_t& c = cached_[static_cast<size_t>(page)];
  if (static_cast<bool>(c) == cached) return;
  if (refs_[static_cast<size_t>(page)] == 1) kept_ += cached ? 1 : -1;
  c = cached;
}

void PagePool::release(std::vector<int32_t>& pages) {
  for (int32_t p : pages) unref(p);
  pages.clear();
}

bool PagePool::census_ok() const {
  int zero = 0, kept = 0;
  for (size_t i = 0; i < refs_.size(); ++i) {
    zero += refs_[i] == 0;
    kept += refs_[i] == 1 && cached_[i];
  }
  return zero == free_count() && kept == kept_ && free_count() + kept_ + used_count() == total();
}

}  // namespace tf
