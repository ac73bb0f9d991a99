#pragma once
// Rotary frequencies for each scaling scheme, computed as transformers computes them.
#include "backend/backend.h"
#include "formats/hf_config.h"

namespace tf {

RopeParams make_rope_params(const HfConfig& cfg, bool interleaved);

}  // namespace tf
