#pragma once
// Bookkeeping every backend shares: tensor shape limits, the blocks alloc() handed out and the
// bytes the backend holds in all (weights, KV and activations).
#include <atomic>
#include <cstdint>
#include <memory>
#include <mutex>
#include <unordered_map>

#include "backend/backend.h"
#include "base/error.h"

namespace tf {

constexpr int64_t kMaxTensorElems = int64_t{1} << 40;

// Shared so storage (weights, KV) may outlive the backend that counted it.
using ByteCounter = std::shared_ptr<std::atomic<uint64_t>>;

// Checks a tensor view is well formed (non-negative sizes, data for non-empty); names the op.
inline void check_tensor(const Tensor& t, const char* op, const char* what) {
  TF_CHECK(t.rows >= 0 && t.cols >= 0 && t.rows <= kMaxTensorElems && t.cols <= kMaxTensorElems, op, ": ",
           what, " has bad shape [", t.rows, " x ", t.cols, "]");
  TF_CHECK(t.rows * t.cols == 0 || t.data != nullptr, op, ": ", what, " [", t.rows, " x ", t.cols,
           "] has no data");
}

// Argument checks of the row ops every backend runs before touching memory.
inline void check_copy(const Tensor& src, const Tensor& dst) {
  check_tensor(src, "copy", "src");
  check_tensor(dst, "copy", "dst");
  TF_CHECK(src.rows == dst.rows && src.cols == dst.cols, "copy: src [", src.rows, " x ", src.cols, "] into dst [",
           dst.rows, " x ", dst.cols, "]");
}

inline void check_gather(const Tensor& src, const int32_t* rows, int n, const Tensor& dst) {
  check_tensor(src, "gather_rows", "src");
  check_tensor(dst, "gather_rows", "dst");
  TF_CHECK(n >= 0 && dst.rows == n && dst.cols == src.cols, "gather_rows: ", n, " rows of src [", src.rows, " x ",
           src.cols, "] into dst [", dst.rows, " x ", dst.cols, "]");
  TF_CHECK(n == 0 || rows != nullptr, "gather_rows: null row list");
  for (int i = 0; i < n; ++i)
    TF_CHECK(rows[i] >= 0 && rows[i] < src.rows, "gather_rows: row ", rows[i], " at ", i, " is outside src of ",
             src.rows, " rows");
}

inline void check_scatter(const Tensor& dst, const Tensor& src, const int32_t* rows, const float* w, int n) {
  check_tensor(src, "scatter_add_scaled", "src");
  check_tensor(dst, "scatter_add_scaled", "dst");
  TF_CHECK(n >= 0 && src.rows == n && dst.cols == src.cols, "scatter_add_scaled: src [", src.rows, " x ", src.cols,
           "] with ", n, " rows into dst [", dst.rows, " x ", dst.cols, "]");
  TF_CHECK(n == 0 || (rows != nullptr && w != nullptr), "scatter_add_scaled: null rows or weights");
  for (int i = 0; i < n; ++i)
    TF_CHECK(rows[i] >= 0 && rows[i] < dst.rows, "scatter_add_scaled: row ", rows[i], " at ", i,
             " is outside dst of ", dst.rows, " rows");
}

class BlockTable {
 public:
  BlockTable() : counter_(std::make_shared<std::atomic<uint64_t>>(0)) {}

  const ByteCounter& counter() const { return counter_; }
  uint64_t bytes_in_use() const { return counter_->load(); }

  // Bytes of an f32 [rows x cols] tensor; throws on a bad or oversized shape.
  static uint64_t tensor_bytes(int64_t rows, int64_t cols) {
    TF_CHECK(rows >= 0 && cols >= 0 && rows <= kMaxTensorElems && cols <= kMaxTensorElems &&
                 (cols == 0 || rows <= kMaxTensorElems / cols),
             "alloc: bad shape [", rows, " x ", cols, "]");
    return static_cast<uint64_t>(rows * cols) * sizeof(float);
  }

  void add(float* p, uint64_t bytes) {
    {
      std::lock_guard<std::mutex> lock(mu_);
      blocks_[p] = bytes;
    }
    counter_->fetch_add(bytes);
  }

  // Forgets t's block; throws unless this table handed it out whole (a slice is not a block).
  void remove(const Tensor& t) {
    uint64_t bytes;
    {
      std::lock_guard<std::mutex> lock(mu_);
      auto it = blocks_.find(t.data);
      TF_CHECK(it != blocks_.end(), "free: tensor [", t.rows, " x ", t.cols,
               "] was not allocated by this backend (or is a slice)");
      bytes = it->second;
      blocks_.erase(it);
    }
    counter_->fetch_sub(bytes);
  }

  // Calls release(p) for every block still handed out (the backend's destructor).
  template <typename F>
  void release_all(F&& release) {
    std::lock_guard<std::mutex> lock(mu_);
    for (auto& [p, bytes] : blocks_) {
      release(p);
      counter_->fetch_sub(bytes);
    }
    blocks_.clear();
  }

 private:
  ByteCounter counter_;
  std::mutex mu_;
  std::unordered_map<float*, uint64_t> blocks_;
};

}  // namespace tf
