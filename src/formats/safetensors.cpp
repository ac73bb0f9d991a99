#include "formats/safetensors.h"

#include <algorithm>
#include <cstring>
#include <filesystem>
#include <set>

#include <nlohmann/json.hpp>

#include "base/error.h"
#include "formats/model_files.h"

namespace tf {

namespace {

constexpr uint64_t kMaxHeaderBytes = 100ull << 20;
constexpr int kMaxHeaderDepth = 4;  // object -> tensor entry -> shape array, plus slack

// Returns the offset of the first byte that breaks UTF-8, or npos when the text is valid.
size_t find_bad_utf8(const uint8_t* s, size_t n) {
  size_t i = 0;
  while (i < n) {
    uint8_t c = s[i];
    if (c < 0x80) { ++i; continue; }
    size_t len;
    uint32_t cp;
    if ((c & 0xe0) == 0xc0) { len = 2; cp = c & 0x1f; }
    else if ((c & 0xf0) == 0xe0) { len = 3; cp = c & 0x0f; }
    else if ((c & 0xf8) == 0xf0) { len = 4; cp = c & 0x07; }
    else return i;
    if (n - i < len) return i;
    for (size_t k = 1; k < len; ++k) {
      if ((s[i + k] & 0xc0) != 0x80) return i;
      cp = cp << 6 | (s[i + k] & 0x3f);
    }
    bool overlong = (len == 2 && cp < 0x80) || (len == 3 && cp < 0x800) || (len == 4 && cp < 0x10000);
    if (overlong || cp > 0x10ffff || (cp >= 0xd800 && cp <= 0xdfff)) return i;
    i += len;
  }
  return std::string::npos;
}

bool parse_dtype(const std::string& s, DType* out) {
  static const std::pair<const char*, DType> kTable[] = {
      {"F32", DType::F32}, {"F16", DType::F16}, {"BF16", DType::BF16}, {"F64", DType::F64},
      {"I8", DType::I8},   {"I16", DType::I16}, {"I32", DType::I32},   {"I64", DType::I64},
      {"U8", DType::U8},   {"BOOL", DType::BOOL}};
  for (const auto& [name, t] : kTable) {
    if (s == name) {
      *out = t;
      return true;
    }
  }
  return false;
}

uint64_t dtype_size(DType t) { return dtype_row_bytes(t, 1); }

// Parses JSON while rejecting duplicate keys and deep nesting, which nlohmann would accept.
nlohmann::json parse_header_json(const char* begin, const char* end, const std::string& path) {
  std::vector<std::set<std::string>> keys;
  std::string problem;
  auto cb = [&](int depth, nlohmann::json::parse_event_t ev, nlohmann::json& parsed) {
    using E = nlohmann::json::parse_event_t;
    if (!problem.empty()) return false;
    if (depth > kMaxHeaderDepth) {
      problem = cat("header nests deeper than ", kMaxHeaderDepth, " levels");
      return false;
    }
    if (ev == E::object_start) {
      keys.emplace_back();
    } else if (ev == E::object_end) {
      if (!keys.empty()) keys.pop_back();
    } else if (ev == E::key && !keys.empty()) {
      const std::string& k = parsed.get_ref<const std::string&>();
      if (!keys.back().insert(k).second) problem = cat("duplicate key '", k, "' in header");
    }
    return true;
  };
  nlohmann::json j;
  try {
    j = nlohmann::json::parse(begin, end, cb, true);
  } catch (const nlohmann::json::exception& e) {
    if (!problem.empty()) fail(path, ": ", problem);
    fail(path, ": header is not valid JSON: ", e.what());
  }
  if (!problem.empty()) fail(path, ": ", problem);
  return j;
}

uint64_t json_u64(const nlohmann::json& v, const std::string& path, const std::string& what) {
  if (!v.is_number_integer() || (!v.is_number_unsigned() && v.get<int64_t>() < 0))
    fail(path, ": ", what, " must be a non-negative integer, got ", v.dump());
  return v.get<uint64_t>();
}

}  // namespace

SafetensorsFile::SafetensorsFile(const std::string& path) : file_(path) {
  const uint64_t size = file_.size();
  const uint8_t* base = file_.data();
  TF_CHECK(size >= 8, path, ": file is ", size, " bytes, too short for the 8-byte header length");
  uint64_t n = 0;
  for (int i = 7; i >= 0; --i) n = n << 8 | base[i];
  TF_CHECK(n >= 2, path, ": header length ", n, " is too small (at least 2 bytes)");
  TF_CHECK(n <= kMaxHeaderBytes, path, ": header length ", n, " exceeds the 100 MB limit");
  TF_CHECK(n <= size - 8, path, ": header length ", n, " exceeds the file size ", size);
  const uint8_t* hdr = base + 8;
  size_t bad = find_bad_utf8(hdr, n);
  TF_CHECK(bad == std::string::npos, path, ": header is not valid UTF-8 (byte ", bad, ")");
  TF_CHECK(hdr[0] == '{', path, ": header is not a JSON object");
  nlohmann::json j = parse_header_json(reinterpret_cast<const char*>(hdr),
                                       reinterpret_cast<const char*>(hdr + n), path);
  TF_CHECK(j.is_object(), path, ": header is not a JSON object");

  const uint64_t buf_size = size - 8 - n;
  const uint8_t* buf = hdr + n;
  struct Span {
    uint64_t begin, end;
    const std::string* name;
  };
  std::vector<Span> spans;
  for (auto it = j.begin(); it != j.end(); ++it) {
    const std::string& name = it.key();
    const nlohmann::json& e = it.value();
    if (name == "__metadata__") {
      TF_CHECK(e.is_object(), path, ": __metadata__ must be an object of strings");
      for (auto m = e.begin(); m != e.end(); ++m)
        TF_CHECK(m.value().is_string(), path, ": __metadata__ entry '", m.key(), "' is not a string");
      continue;
    }
    const std::string ctx = cat("tensor '", name, "'");
    TF_CHECK(e.is_object(), path, ": ", ctx, ": entry is not an object");
    for (auto f = e.begin(); f != e.end(); ++f) {
      const std::string& k = f.key();
      TF_CHECK(k == "dtype" || k == "shape" || k == "data_offsets", path, ": ", ctx,
               ": unknown field '", k, "'");
    }
    TF_CHECK(e.contains("dtype") && e["dtype"].is_string(), path, ": ", ctx, ": missing string field 'dtype'");
    TF_CHECK(e.contains("shape") && e["shape"].is_array(), path, ": ", ctx, ": missing array field 'shape'");
    TF_CHECK(e.contains("data_offsets") && e["data_offsets"].is_array() && e["data_offsets"].size() == 2,
             path, ": ", ctx, ": 'data_offsets' must be an array [begin, end]");
    TensorView v;
    v.name = name;
    const std::string& ds = e["dtype"].get_ref<const std::string&>();
    if (!parse_dtype(ds, &v.dtype))
      fail(path, ": ", ctx, ": dtype '", ds, "' is not supported (F32 F16 BF16 F64 I8 I16 I32 I64 U8 BOOL)");
    // Zero dims are allowed, but the other dims' product must still fit so shape math never wraps.
    uint64_t numel = 1;
    bool empty = false;
    for (const auto& d : e["shape"]) {
      uint64_t dim = json_u64(d, path, ctx + " shape entry");
      if (dim == 0) empty = true;
      TF_CHECK(dim == 0 || (!__builtin_mul_overflow(numel, dim, &numel) && numel <= uint64_t(INT64_MAX)),
               path, ": ", ctx, ": shape ", e["shape"].dump(), " overflows the element count");
      v.shape.push_back(static_cast<int64_t>(dim));
    }
    if (empty) numel = 0;
    uint64_t nbytes = 0;
    TF_CHECK(!__builtin_mul_overflow(numel, dtype_size(v.dtype), &nbytes), path, ": ", ctx,
             ": shape ", e["shape"].dump(), " overflows the byte count");
    uint64_t b = json_u64(e["data_offsets"][0], path, ctx + " data_offsets[0]");
    uint64_t en = json_u64(e["data_offsets"][1], path, ctx + " data_offsets[1]");
    TF_CHECK(b <= en, path, ": ", ctx, ": data_offsets end ", en, " is before begin ", b);
    TF_CHECK(en <= buf_size, path, ": ", ctx, ": data_offsets end ", en, " is past the data buffer (",
             buf_size, " bytes)");
    TF_CHECK(en - b == nbytes, path, ": ", ctx, ": data_offsets span ", en - b, " bytes but shape ",
             e["shape"].dump(), " of ", ds, " needs ", nbytes);
    v.data = buf + b;
    v.nbytes = nbytes;
    auto [pos, inserted] = tensors_.emplace(name, std::move(v));
    TF_CHECK(inserted, path, ": duplicate tensor name '", name, "'");
    spans.push_back({b, en, &pos->first});
  }
  std::sort(spans.begin(), spans.end(), [](const Span& a, const Span& b) {
    return a.begin != b.begin ? a.begin < b.begin : a.end < b.end;
  });
  uint64_t cursor = 0;
  const std::string* prev = nullptr;
  for (const auto& s : spans) {
    if (s.begin < cursor)
      fail(path, ": tensor '", *s.name, "' [", s.begin, ", ", s.end, ") overlaps tensor '", *prev, "'");
    if (s.begin > cursor)
      fail(path, ": bytes [", cursor, ", ", s.begin, ") of the data buffer belong to no tensor (before '",
           *s.name, "')");
    cursor = s.end;
    prev = s.name;
  }
  TF_CHECK(cursor == buf_size, path, ": bytes [", cursor, ", ", buf_size,
           ") at the end of the data buffer belong to no tensor");
}

namespace {

bool plain_file_name(const std::string& s) {
  if (s.empty() || s == "." || s == "..") return false;
  for (char c : s) {
    if (c == '/' || c == '\\' || static_cast<unsigned char>(c) < 0x20) return false;
  }
  return true;
}

}  // namespace

SafetensorsSet::SafetensorsSet(const std::string& folder) : folder_(folder) {
  namespace fs = std::filesystem;
  const fs::path dir(folder);
  std::error_code ec;
  TF_CHECK(fs::is_directory(dir, ec), folder, ": not a directory");
  std::map<std::string, size_t> shard_of_file;
  auto load = [&](const std::string& file) -> size_t {
    auto it = shard_of_file.find(file);
    if (it != shard_of_file.end()) return it->second;
    files_.push_back(std::make_unique<SafetensorsFile>((dir / file).string()));
    const SafetensorsFile& f = *files_.back();
    for (const auto& [name, view] : f.tensors()) {
      auto [pos, inserted] = index_.emplace(name, &view);
      if (!inserted)
        fail(folder, ": tensor '", name, "' appears in both ", file, " and another shard");
    }
    shard_of_file.emplace(file, files_.size() - 1);
    return files_.size() - 1;
  };

  const fs::path index_path = dir / "model.safetensors.index.json";
  if (fs::exists(index_path, ec)) {
    const std::string ip = index_path.string();
    nlohmann::json idx = read_json_file(ip);
    TF_CHECK(idx.is_object() && idx.contains("weight_map") && idx["weight_map"].is_object(), ip,
             ": missing object 'weight_map'");
    for (auto it = idx["weight_map"].begin(); it != idx["weight_map"].end(); ++it) {
      TF_CHECK(it.value().is_string(), ip, ": weight_map entry '", it.key(), "' is not a string");
      const std::string& shard = it.value().get_ref<const std::string&>();
      TF_CHECK(plain_file_name(shard), ip, ": weight_map entry '", it.key(), "' names shard '", shard,
               "', which is not a plain file name in the folder");
      size_t k = load(shard);
      TF_CHECK(files_[k]->tensors().count(it.key()), ip, ": tensor '", it.key(), "' is not in shard ",
               shard);
    }
    TF_CHECK(!files_.empty(), ip, ": weight_map names no tensors");
    return;
  }
  if (fs::exists(dir / "model.safetensors", ec)) {
    load("model.safetensors");
    return;
  }
  std::vector<std::string> found;
  // Increments take an error_code so a folder that changes underfoot cannot throw past us.
  for (fs::directory_iterator it(dir, ec), end; !ec && it != end; it.increment(ec)) {
    const std::string fname = it->path().filename().string();
    std::error_code type_ec;
    if (it->is_regular_file(type_ec) && fname.size() > 12 &&
        fname.compare(fname.size() - 12, 12, ".safetensors") == 0)
      found.push_back(fname);
  }
  TF_CHECK(!ec, folder, ": cannot list the folder: ", ec.message());
  TF_CHECK(!found.empty(), folder, ": no *.safetensors files in the folder");
  std::sort(found.begin(), found.end());
  for (const auto& f : found) load(f);
}

const TensorView* SafetensorsSet::find(const std::string& name) const {
  auto it = index_.find(name);
  return it == index_.end() ? nullptr : it->second;
}

std::vector<std::string> SafetensorsSet::names() const {
  std::vector<std::string> out;
  out.reserve(index_.size());
  for (const auto& [name, v] : index_) out.push_back(name);
  return out;
}

}  // namespace tf
