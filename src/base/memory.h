#pragma once
// Process memory as the OS counts it: resident set now and its peak.
#include <cstdint>

namespace tf {

struct ProcessMemory {
  uint64_t rss_bytes = 0;
  uint64_t peak_rss_bytes = 0;
  uint64_t anon_bytes = 0;  // resident anonymous memory: RSS less mapped files and shared memory
};

ProcessMemory process_memory();
uint64_t total_ram_bytes();

}  // namespace tf
