#pragma once
// Byte-level builders for GGUF and safetensors test files, a temp folder, and error checks.
#include <gtest/gtest.h>

#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <unistd.h>
#include <filesystem>
#include <fstream>
#include <functional>
#include <optional>
#include <string>
#include <vector>

#include "base/error.h"

namespace tf::testing {

using Bytes = std::vector<uint8_t>;

class TempDir {
 public:
  TempDir() {
    // Memory-backed when available: the truncation and corruption loops rewrite files often.
    std::error_code ec;
    std::filesystem::path base = std::filesystem::is_directory("/dev/shm", ec) && ::access("/dev/shm", W_OK) == 0
                                     ? std::filesystem::path("/dev/shm")
                                     : std::filesystem::temp_directory_path();
    std::string tmpl = (base / "tf_formats_XXXXXX").string();
    if (!::mkdtemp(tmpl.data())) throw std::runtime_error("mkdtemp failed");
    path_ = tmpl;
  }
  ~TempDir() {
    std::error_code ec;
    std::filesystem::remove_all(path_, ec);
  }
  std::string file(const std::string& name) const { return (std::filesystem::path(path_) / name).string(); }
  const std::string& path() const { return path_; }

 private:
  std::string path_;
};

inline void write_bytes(const std::string& path, const Bytes& b) {
  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  out.write(reinterpret_cast<const char*>(b.data()), static_cast<std::streamsize>(b.size()));
}
inline void write_text(const std::string& path, const std::string& s) {
  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  out << s;
}

// Runs fn and expects a tf::Error whose message names `path` and contains `needle`.
inline void expect_error(const std::function<void()>& fn, const std::string& path, const std::string& needle) {
  try {
    fn();
    ADD_FAILURE() << "expected an error containing '" << needle << "'";
  } catch (const tf::Error& e) {
    std::string msg = e.what();
    EXPECT_NE(msg.find(path), std::string::npos) << "message lacks the path: " << msg;
    EXPECT_NE(msg.find(needle), std::string::npos) << "message lacks '" << needle << "': " << msg;
  } catch (const std::exception& e) {
    ADD_FAILURE() << "expected tf::Error, got another exception: " << e.what();
  }
}

struct ByteWriter {
  Bytes b;
  template <typename T>
  ByteWriter& put(T v) {
    uint8_t tmp[sizeof(T)];
    std::memcpy(tmp, &v, sizeof(T));
    b.insert(b.end(), tmp, tmp + sizeof(T));
    return *this;
  }
  ByteWriter& u8(uint8_t v) { return put(v); }
  ByteWriter& u32(uint32_t v) { return put(v); }
  ByteWriter& u64(uint64_t v) { return put(v); }
  ByteWriter& str(const std::string& s) {
    u64(s.size());
    b.insert(b.end(), s.begin(), s.end());
    return *this;
  }
  ByteWriter& raw(const Bytes& r) {
    b.insert(b.end(), r.begin(), r.end());
    return *this;
  }
};

// GGUF value type numbers.
enum : uint32_t { kU8 = 0, kI8, kU16, kI16, kU32, kI32, kF32, kBool, kString, kArray, kU64, kI64, kF64 };

// Builds a GGUF file: key-values as raw encoded bytes, tensors with their data laid out
// at aligned offsets. Counts can be overridden to write lying headers.
struct GgufBuilder {
  uint32_t version = 3;
  uint64_t alignment = 32;
  std::vector<Bytes> kvs;
  struct Tensor {
    std::string name;
    std::vector<uint64_t> ne;  // GGUF order: innermost first
    uint32_t type;
    Bytes data;
    std::optional<uint64_t> offset_override;
  };
  std::vector<Tensor> tensors;
  std::optional<uint64_t> kv_count_override, tensor_count_override;

  GgufBuilder& kv_raw(const std::string& key, uint32_t type, const Bytes& value) {
    ByteWriter w;
    w.str(key).u32(type).raw(value);
    kvs.push_back(w.b);
    return *this;
  }
  GgufBuilder& kv_u32(const std::string& key, uint32_t v) { return kv_raw(key, kU32, ByteWriter().u32(v).b); }
  GgufBuilder& kv_f32(const std::string& key, float v) { return kv_raw(key, kF32, ByteWriter().put(v).b); }
  GgufBuilder& kv_str(const std::string& key, const std::string& v) { return kv_raw(key, kString, ByteWriter().str(v).b); }
  GgufBuilder& kv_strings(const std::string& key, const std::vector<std::string>& v) {
    ByteWriter w;
    w.u32(kString).u64(v.size());
    for (const auto& s : v) w.str(s);
    return kv_raw(key, kArray, w.b);
  }
  GgufBuilder& tensor(const std::string& name, std::vector<uint64_t> ne, uint32_t type, Bytes data) {
    tensors.push_back({name, std::move(ne), type, std::move(data), std::nullopt});
    return *this;
  }

  Bytes build() const {
    ByteWriter w;
    w.raw({'G', 'G', 'U', 'F'}).u32(version);
    w.u64(tensor_count_override.value_or(tensors.size()));
    w.u64(kv_count_override.value_or(kvs.size()));
    for (const auto& kv : kvs) w.raw(kv);
    uint64_t off = 0;
    for (const auto& t : tensors) {
      w.str(t.name).u32(static_cast<uint32_t>(t.ne.size()));
      for (auto d : t.ne) w.u64(d);
      w.u32(t.type);
      w.u64(t.offset_override.value_or(off));
      off += (t.data.size() + alignment - 1) / alignment * alignment;
    }
    for (size_t i = 0; i < tensors.size(); ++i) {
      while (w.b.size() % alignment) w.u8(0);
      w.raw(tensors[i].data);
    }
    return w.b;
  }
};

inline Bytes f32_bytes(const std::vector<float>& v) {
  Bytes b(v.size() * 4);
  std::memcpy(b.data(), v.data(), b.size());
  return b;
}

// A safetensors file from its header text and data buffer.
inline Bytes safetensors_bytes(const std::string& header, const Bytes& data) {
  ByteWriter w;
  w.u64(header.size());
  w.b.insert(w.b.end(), header.begin(), header.end());
  w.raw(data);
  return w.b;
}

}  // namespace tf::testing
