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
  int used_count() const { return total() - free_count() - kept_; }
  // Pages referenced only by the prompt cache (kept: evictable).
  int kept_count() const { return kept_; }

  // Takes n pages, lowest ids first so runs are repeatable; false (and nothing taken) when short.
  bool alloc(int n, std::vector<int32_t>& out);
  void ref(int32_t page);
  void unref(int32_t page);
  void release(std::vector<int32_t>& pages);  // unref all, then clear
  int refcount(int32_t page) const { return refs_.at(static_cast<size_t>(page)); }
  // The prompt cache holds (or stops holding) one of the page's references.
  void set_cached(int32_t page, bool cached);
  bool cached(int32_t page) const { return cached_.at(static_cast<size_t>(page)) != 0; }
  // free + kept + used == total, every free page unreferenced, kept matches a full count.
  bool census_ok() const;

 private:
  int page_size_;
  std::vector<int32_t> refs_;
  std::vector<int32_t> free_;  // stack, lowest id on top
  std::vector<uint8_t> cached_;
  int kept_ = 0;
  void update_kept(int32_t page, int before, int after);
};

}  // namespace tf
