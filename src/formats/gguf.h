#pragma once
// GGUF v2/v3 files: metadata, tensor infos and data, memory-mapped and checked before use.
#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "base/mapped_file.h"
#include "formats/weight_source.h"

namespace tf {

enum class GgufType : uint32_t {
  U8 = 0, I8 = 1, U16 = 2, I16 = 3, U32 = 4, I32 = 5, F32 = 6, BOOL = 7,
  STRING = 8, ARRAY = 9, U64 = 10, I64 = 11, F64 = 12,
};

struct GgufValue {
  GgufType type = GgufType::U8;
  // Scalars: integers in i (signed types) or u (unsigned and bool), floats in f.
  int64_t i = 0;
  uint64_t u = 0;
  double f = 0;
  std::string str;
  // Arrays: element type and elements (each element a scalar or string GgufValue).
  GgufType elem_type = GgufType::U8;
  std::vector<GgufValue> arr;

  bool is_int() const;
  // Checked conversions: throw an error naming key and type when the value is not one.
  int64_t as_int(const std::string& key) const;
  double as_float(const std::string& key) const;
  bool as_bool(const std::string& key) const;
  const std::string& as_string(const std::string& key) const;
};

class GgufFile : public WeightSource {
 public:
  explicit GgufFile(const std::string& path);

  uint32_t version() const { return version_; }
  uint64_t alignment() const { return alignment_; }
  const std::map<std::string, GgufValue>& metadata() const { return meta_; }
  const GgufValue* find_meta(const std::string& key) const;
  // Typed getters; the fallback is returned when the key is absent, a wrong type throws.
  int64_t get_int(const std::string& key, int64_t fallback) const;
  double get_float(const std::string& key, double fallback) const;
  bool get_bool(const std::string& key, bool fallback) const;
  std::string get_string(const std::string& key, const std::string& fallback) const;
  std::vector<std::string> get_strings(const std::string& key) const;  // empty when absent
  std::vector<double> get_floats(const std::string& key) const;
  std::vector<int64_t> get_ints(const std::string& key) const;

  // Tensors under their GGUF names (token_embd.weight, blk.0.attn_q.weight, ...). Shapes are
  // given outermost first as in safetensors (GGUF's ne reversed).
  const TensorView* find(const std::string& name) const override;
  std::vector<std::string> names() const override;
  std::string describe() const override { return file_.path(); }
  const std::string& path() const { return file_.path(); }

 private:
  MappedFile file_;
  uint32_t version_ = 0;
  uint64_t alignment_ = 32;
  std::map<std::string, GgufValue> meta_;
  std::map<std::string, TensorView> tensors_;
};

}  // namespace tf
