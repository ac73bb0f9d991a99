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

}  // namespace tf::contract
