// libFuzzer target: any byte string must load or throw tf::Error, never crash.
#include <unistd.h>

#include <cstdint>
#include <cstdio>
#include <string>

#include "base/error.h"
#include "formats/safetensors.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  // The parser maps files, so each input goes through a per-process temp file.
  static const std::string path = "/tmp/tf_fuzz_" + std::to_string(::getpid()) + ".safetensors";
  FILE* f = std::fopen(path.c_str(), "wb");
  if (!f) return 0;
  if (size) std::fwrite(data, 1, size, f);
  std::fclose(f);
  try {
    tf::SafetensorsFile s(path);
    for (const auto& [n, v] : s.tensors()) (void)v.nbytes;
  } catch (const tf::Error&) {
  }
  return 0;
}
