// libFuzzer target: any config.json text must parse into a model config or throw tf::Error.
#include <cstdint>
#include <string>

#include <nlohmann/json.hpp>

#include "base/error.h"
#include "base/json_capped.h"
#include "formats/hf_config.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string text(reinterpret_cast<const char*>(data), size);
  nlohmann::json j;
  try {
    j = tf::parse_json_capped<nlohmann::json>(text, [] { tf::fail("config.json nests too deep"); });
  } catch (const nlohmann::json::exception&) {
    return 0;  // not JSON: read_json_file turns that into a tf::Error first
  } catch (const tf::Error&) {
    return 0;
  }
  try {
    (void)tf::parse_hf_config(j, "config.json");
  } catch (const tf::Error&) {
  }
  return 0;
}
