#pragma once
// Named tensors of a model, whatever file format they came from.
#include <memory>
#include <string>
#include <vector>

#include "base/dtype.h"

namespace tf {

class WeightSource {
 public:
  virtual ~WeightSource() = default;
  virtual const TensorView* find(const std::string& name) const = 0;
  virtual std::vector<std::string> names() const = 0;
  // Throws an error naming the source and the tensor when it is missing.
  const TensorView& get(const std::string& name) const;
  uint64_t total_bytes() const;
  virtual std::string describe() const = 0;
};

}  // namespace tf
