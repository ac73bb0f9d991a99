#pragma once
// One running sequence of the engine, shared by the engine's source files.
#include <cstdint>
#include <utility>
#include <vector>

#include "engine/engine.h"

namespace tf {

struct Engine::Lane {
  int index = 0;
  bool active = false;
  uint64_t id = 0;
  GenerationRequest req;
  std::vector<int32_t> tokens;  // prompt then generated
  std::vector<int32_t> pages;
  int computed = 0;
  int generated = 0;
  int cached = 0;  // prompt tokens adopted from the prefix store
  int state = -1;  // recurrent state slot (models with recurrent layers)
  bool waiting = false;  // a sibling waiting for its leader's prompt
  std::vector<std::pair<int, uint64_t>> followers;  // (lane, request) of siblings sharing this prompt
  PenaltyHistory penalties;  // of request pen_for, when its sampling has penalties
  uint64_t pen_for = 0;
};

}  // namespace tf
