#pragma once
// Fixed-size KV pages with reference counts. The pool owns its invariant: free + used == total.
#include <cstddef>
#include <cstdint>
#include <vector>

namespace tf {

class PagePool {
 public:
  PagePool(int total_pages, int page_size);

  int page_size() const { return page_size_; }
  int total() const { return static_cast<int>(refs_.size()); }
  int free_count() const { return static_cast<int>(free_.size()); }
  int used_count() const { return total() - free_count(); }

  // Takes n pages, lowest ids first so runs are repeatable; false (and nothing taken) when short.
  bool alloc(int n, std::vector<int32_t>& out);
  void ref(int32_t page);
  void unref(int32_t page);
  void release(std::vector<int32_t>& pages);  // unref all, then clear
  int refcount(int32_t page) const { return refs_.at(static_cast<size_t>(page)); }
  // free + used == total and every free page has no references.
  bool census_ok() const;

 private:
  int page_size_;
  std::vector<int32_t> refs_;
  std::vector<int32_t> free_;  // stack, lowest id on top
};

}  // namespace tf
