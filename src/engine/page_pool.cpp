#include "engine/page_pool.h"

#include "base/error.h"

namespace tf {

PagePool::PagePool(int total_pages, int page_size) : page_size_(page_size) {
  TF_CHECK(total_pages > 0 && page_size > 0, "page pool: ", total_pages, " pages of ", page_size, " positions");
  refs_.assign(static_cast<size_t>(total_pages), 0);
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

void PagePool::ref(int32_t page) {
  TF_CHECK(page >= 0 && page < total() && refs_[static_cast<size_t>(page)] > 0, "page pool: ref of free page ", page);
  refs_[static_cast<size_t>(page)]++;
}

void PagePool::unref(int32_t page) {
  TF_CHECK(page >= 0 && page < total() && refs_[static_cast<size_t>(page)] > 0, "page pool: unref of free page ", page);
  if (--refs_[static_cast<size_t>(page)] == 0) free_.push_back(page);
}

void PagePool::release(std::vector<int32_t>& pages) {
  for (int32_t p : pages) unref(p);
  pages.clear();
}

bool PagePool::census_ok() const {
  int zero = 0;
  for (int32_t r : refs_) zero += r == 0;
  return zero == free_count();
}

}  // namespace tf
