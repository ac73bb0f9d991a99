#include "base/memory.h"

#include <unistd.h>

#include <cstdio>
#include <cstring>

namespace tf {

ProcessMemory process_memory() {
  ProcessMemory m;
  FILE* f = std::fopen("/proc/self/status", "r");
  if (!f) return m;
  char line[256];
  while (std::fgets(line, sizeof line, f)) {
    unsigned long long kb = 0;
    if (std::sscanf(line, "VmRSS: %llu kB", &kb) == 1) m.rss_bytes = kb * 1024;
    if (std::sscanf(line, "VmHWM: %llu kB", &kb) == 1) m.peak_rss_bytes = kb * 1024;
    if (std::sscanf(line, "RssAnon: %llu kB", &kb) == 1) m.anon_bytes = kb * 1024;
  }
  std::fclose(f);
  return m;
}

uint64_t total_ram_bytes() {
  long pages = sysconf(_SC_PHYS_PAGES), size = sysconf(_SC_PAGE_SIZE);
  return pages > 0 && size > 0 ? static_cast<uint64_t>(pages) * static_cast<uint64_t>(size) : 0;
}

}  // namespace tf
