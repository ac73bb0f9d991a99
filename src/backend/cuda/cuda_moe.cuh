#pragma once
// What the MoE layer (cuda_moe.cu) and its routing (cuda_moe_route.cu) share.
#include <cstdint>

#include "backend/cuda/cuda_backend.h"

namespace tf::cuda {

constexpr int kMaxExperts = 1024;
constexpr int kMaxK = 32;

// Where routing writes: each row's k experts (idx) and weights (w) [rows x k], the pairs listed by
// expert (order), the work items of at most rpi pairs (items, 3 ints each) and their count.
struct RouteLists {
  int32_t* idx;
  float* w;
  int32_t* order;
  int32_t* items;
  int32_t* n_items;
};

// Routes m rows of E logits each (bias: the sigmoid router's, or null) and lists the pairs, on the
// stream, with no host round trip.
void moe_route(const float* logits, const float* bias, int m, int E, const MoeRoute& route, int rpi,
               const RouteLists& out);

}  // namespace tf::cuda
