#pragma once
// Kernel contract of the fused MoE op (Backend::moe_experts): gate, cases and planted faults.
#include <functional>
#include <string>
#include <utility>
#include <vector>

#include "backend/backend.h"

namespace tf::contract {

using MoeCase = std::pair<std::string, std::function<std::string(Backend&, Backend&)>>;

std::vector<MoeCase> moe_kernel_cases();
std::vector<MoeCase> moe_control_cases();

// Timings of moe_experts at real MoE shapes (decode rows 1, 8, 64), timed by time_ms(fn, iters).
void bench_moe(Backend& gpu, const std::function<float(const std::function<void()>&, int)>& time_ms);

}  // namespace tf::contract
