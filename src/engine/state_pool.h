#pragma once
// Slots of recurrent state (Mamba2, Gated DeltaNet). A round reads each lane's state from its slot
// and writes the advanced state into a pending slot, so a failed round leaves the old state whole;
// a restored prompt-cache state and a mark snapshot each pass through one staging slot. The pool
// is sized to the states that can exist at once: 2 * lanes + 3 (every lane's state and its pending
// forward, the restore staging slot, the snapshot staging slot, one spare).
#include <cstddef>
#include <cstdint>
#include <vector>

namespace tf {

class StatePool {
 public:
  explicit StatePool(int lanes = 0);
  static int capacity_for(int lanes) { return 2 * lanes + 3; }
  int capacity() const { return static_cast<int>(used_.size()); }
  // A free slot (lowest id first); throws tf::Error naming the pool when none is left.
  int alloc();
  void release(int slot);
  int in_use() const { return in_use_; }
  int free_count() const { return capacity() - in_use_; }
  int high_water() const { return high_water_; }
  bool used(int slot) const { return slot >= 0 && slot < capacity() && used_[static_cast<size_t>(slot)]; }

 private:
  std::vector<uint8_t> used_;
  int in_use_ = 0;
  int high_water_ = 0;
};

}  // namespace tf
