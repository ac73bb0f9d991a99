// libFuzzer target: any tokenizer.json text must load and encode/decode a hard string, or throw
// tf::Error, never crash.
#include <cstdint>
#include <string>

#include <nlohmann/json.hpp>

#include "base/error.h"
#include "base/json_capped.h"
#include "formats/model_files.h"
#include "tokenizer/tokenizer.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string text(reinterpret_cast<const char*>(data), size);
  tf::ModelFiles mf;
  mf.path = "fuzz";
  mf.config = nlohmann::json::object();
  mf.generation_config = nlohmann::json::object();
  mf.tokenizer_config = nlohmann::json::object();
  try {
    mf.tokenizer_json =
        tf::parse_json_capped<nlohmann::json>(text, [] { tf::fail("tokenizer.json nests too deep"); });
  } catch (const nlohmann::json::exception&) {
    return 0;  // not JSON: read_json_file turns that into a tf::Error before a tokenizer sees it
  } catch (const tf::Error&) {
    return 0;
  }
  try {
    auto tok = tf::load_tokenizer(mf);
    static const std::string hard =
        "Hello  world!\n\t 日本語 😀👍🏽 e\u0301 1234567 <s></s><|endoftext|> \xe2\x80\x8b it's   ";
    for (bool special : {false, true}) {
      const auto ids = tok->encode(hard, special, special);
      (void)tok->decode(ids, !special);
      tf::StreamDecoder sd(*tok);
      for (int32_t id : ids) (void)sd.push(id);
      (void)sd.flush();
    }
  } catch (const tf::Error&) {
  }
  return 0;
}
