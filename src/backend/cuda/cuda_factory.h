#pragma once
// Entry points of the CUDA backend that plain C++ code may call (no CUDA headers here).
#include <memory>

#include "backend/backend.h"

namespace tf {

// A backend on GPU `device`; throws tf::Error when there is no such device or no driver.
std::unique_ptr<Backend> make_cuda_backend(int device);

// Number of usable CUDA devices; 0 when there is no driver or no GPU (never throws).
int cuda_device_count() noexcept;

}  // namespace tf
