#include "engine/state_pool.h"

#include "base/error.h"

namespace tf {

StatePool::StatePool(int lanes) : used_(static_cast<size_t>(lanes > 0 ? capacity_for(lanes) : 0), 0) {}

int StatePool::alloc() {
  for (size_t i = 0; i < used_.size(); ++i)
    if (!used_[i]) {
      used_[i] = 1;
      ++in_use_;
      if (in_use_ > high_water_) high_water_ = in_use_;
      return static_cast<int>(i);
    }
  fail("recurrent state pool: all ", capacity(), " slots are in use");
}

void StatePool::release(int slot) {
  TF_CHECK(used(slot), "recurrent state pool: slot ", slot, " released but not in use");
  used_[static_cast<size_t>(slot)] = 0;
  --in_use_;
}

}  // namespace tf
