#include "formats/weight_source.h"

#include "base/error.h"

namespace tf {

const TensorView& WeightSource::get(const std::string& name) const {
  const TensorView* t = find(name);
  if (!t) fail(describe(), ": tensor '", name, "' is missing");
  return *t;
}

uint64_t WeightSource::total_bytes() const {
  uint64_t total = 0;
  for (const auto& n : names()) {
    if (const TensorView* t = find(n)) total += t->nbytes;
  }
  return total;
}

}  // namespace tf
