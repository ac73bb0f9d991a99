#include "backend/backend.h"

#include "base/argmax.h"

namespace tf {

void Backend::argmax_rows(const Tensor& x, int32_t* ids) {
  std::vector<float> row(static_cast<size_t>(x.cols));
  for (int64_t r = 0; r < x.rows; ++r) {
    to_host(x.slice_rows(r, 1), row.data());
    ids[r] = argmax(row.data(), static_cast<int32_t>(x.cols));
  }
}

}  // namespace tf
