#include "formats/gguf.h"

#include <cstring>
#include <set>

#include "base/error.h"

namespace tf {

namespace {

constexpr int kMaxArrayDepth = 4;
constexpr uint64_t kMaxKeyBytes = 1 << 16;
constexpr uint64_t kMaxTensorNameBytes = 1 << 12;
constexpr uint64_t kMaxAlignment = 1 << 20;
// Bounds the parsed metadata: each element costs a GgufValue, far more than its file bytes.
constexpr uint64_t kMaxMetaElements = 1 << 22;

const char* type_name(GgufType t) {
  switch (t) {
    case GgufType::U8: return "U8";
    case GgufType::I8: return "I8";
    case GgufType::U16: return "U16";
    case GgufType::I16: return "I16";
    case GgufType::U32: return "U32";
    case GgufType::I32: return "I32";
    case GgufType::F32: return "F32";
    case GgufType::BOOL: return "BOOL";
    case GgufType::STRING: return "STRING";
    case GgufType::ARRAY: return "ARRAY";
    case GgufType::U64: return "U64";
    case GgufType::I64: return "I64";
    case GgufType::F64: return "F64";
  }
  return "?";
}

// Smallest encoded size of one value of the type, used to bound counts before allocating.
uint64_t min_value_bytes(GgufType t) {
  switch (t) {
    case GgufType::U8: case GgufType::I8: case GgufType::BOOL: return 1;
    case GgufType::U16: case GgufType::I16: return 2;
    case GgufType::U32: case GgufType::I32: case GgufType::F32: return 4;
    case GgufType::U64: case GgufType::I64: case GgufType::F64: case GgufType::STRING: return 8;
    case GgufType::ARRAY: return 12;
  }
  return 1;
}

const char* ggml_type_name(uint32_t t) {
  static const char* const kNames[] = {
      "F32", "F16", "Q4_0", "Q4_1", nullptr, nullptr, "Q5_0", "Q5_1", "Q8_0", "Q8_1",
      "Q2_K", "Q3_K", "Q4_K", "Q5_K", "Q6_K", "Q8_K", "IQ2_XXS", "IQ2_XS", "IQ3_XXS", "IQ1_S",
      "IQ4_NL", "IQ3_S", "IQ2_S", "IQ4_XS", "I8", "I16", "I32", "I64", "F64", "IQ1_M", "BF16",
      nullptr, nullptr, nullptr, "TQ1_0", "TQ2_0", nullptr, nullptr, nullptr, "MXFP4"};
  if (t < sizeof(kNames) / sizeof(kNames[0]) && kNames[t]) return kNames[t];
  return nullptr;
}

class Reader {
 public:
  Reader(const uint8_t* data, uint64_t size, const std::string& path) : p_(data), size_(size), path_(path) {}

  uint64_t pos() const { return pos_; }
  uint64_t remaining() const { return size_ - pos_; }

  void need(uint64_t n, const std::string& what) const {
    if (n > remaining())
      fail(path_, ": ", what, " needs ", n, " bytes at offset ", pos_, " but only ", remaining(), " remain");
  }
  template <typename T>
  T read(const std::string& what) {
    need(sizeof(T), what);
    T v;
    std::memcpy(&v, p_ + pos_, sizeof(T));
    pos_ += sizeof(T);
    return v;
  }
  std::string read_string(const std::string& what, uint64_t max_len) {
    uint64_t n = read<uint64_t>(what + " length");
    need(n, cat(what, " of length ", n));
    if (n > max_len) fail(path_, ": ", what, " length ", n, " exceeds the limit ", max_len);
    std::string s(reinterpret_cast<const char*>(p_ + pos_), n);
    pos_ += n;
    return s;
  }

 private:
  const uint8_t* p_;
  uint64_t size_;
  uint64_t pos_ = 0;
  const std::string& path_;
};

GgufType read_type(Reader& r, const std::string& path, const std::string& what) {
  uint32_t t = r.read<uint32_t>(what);
  if (t > static_cast<uint32_t>(GgufType::F64)) fail(path, ": ", what, " ", t, " is not a GGUF value type");
  return static_cast<GgufType>(t);
}

void read_value(Reader& r, GgufValue& v, GgufType type, int depth, const std::string& path,
                const std::string& key, uint64_t& elements) {
  v.type = type;
  switch (type) {
    case GgufType::U8: v.u = r.read<uint8_t>(key); break;
    case GgufType::U16: v.u = r.read<uint16_t>(key); break;
    case GgufType::U32: v.u = r.read<uint32_t>(key); break;
    case GgufType::U64: v.u = r.read<uint64_t>(key); break;
    case GgufType::I8: v.i = r.read<int8_t>(key); break;
    case GgufType::I16: v.i = r.read<int16_t>(key); break;
    case GgufType::I32: v.i = r.read<int32_t>(key); break;
    case GgufType::I64: v.i = r.read<int64_t>(key); break;
    case GgufType::F32: v.f = r.read<float>(key); break;
    case GgufType::F64: v.f = r.read<double>(key); break;
    case GgufType::BOOL: {
      uint8_t b = r.read<uint8_t>(key);
      if (b > 1) fail(path, ": key '", key, "': BOOL value ", int(b), " is neither 0 nor 1");
      v.u = b;
      break;
    }
    case GgufType::STRING: v.str = r.read_string(cat("key '", key, "' string"), UINT64_MAX); break;
    case GgufType::ARRAY: {
      if (depth >= kMaxArrayDepth) fail(path, ": key '", key, "': arrays nest deeper than ", kMaxArrayDepth);
      v.elem_type = read_type(r, path, cat("key '", key, "' array element type"));
      uint64_t n = r.read<uint64_t>(cat("key '", key, "' array count"));
      uint64_t min = min_value_bytes(v.elem_type);
      if (n > r.remaining() / min)
        fail(path, ": key '", key, "': array of ", n, " ", type_name(v.elem_type),
             " elements cannot fit in the ", r.remaining(), " bytes left");
      if (n > kMaxMetaElements - elements)
        fail(path, ": key '", key, "': array of ", n, " elements passes the metadata limit of ",
             kMaxMetaElements, " elements");
      elements += n;
      v.arr.resize(n);
      for (uint64_t k = 0; k < n; ++k) read_value(r, v.arr[k], v.elem_type, depth + 1, path, key, elements);
      break;
    }
  }
}

bool is_unsigned(GgufType t) {
  return t == GgufType::U8 || t == GgufType::U16 || t == GgufType::U32 || t == GgufType::U64;
}
bool is_signed(GgufType t) {
  return t == GgufType::I8 || t == GgufType::I16 || t == GgufType::I32 || t == GgufType::I64;
}

}  // namespace

bool GgufValue::is_int() const { return is_unsigned(type) || is_signed(type); }

int64_t GgufValue::as_int(const std::string& key) const {
  if (is_signed(type)) return i;
  if (is_unsigned(type)) {
    if (u > static_cast<uint64_t>(INT64_MAX)) fail(key, ": value ", u, " does not fit a signed 64-bit integer");
    return static_cast<int64_t>(u);
  }
  fail(key, ": expected an integer, found ", type_name(type));
}

double GgufValue::as_float(const std::string& key) const {
  if (type == GgufType::F32 || type == GgufType::F64) return f;
  if (is_signed(type)) return static_cast<double>(i);
  if (is_unsigned(type)) return static_cast<double>(u);
  fail(key, ": expected a number, found ", type_name(type));
}

bool GgufValue::as_bool(const std::string& key) const {
  if (type != GgufType::BOOL) fail(key, ": expected BOOL, found ", type_name(type));
  return u != 0;
}

const std::string& GgufValue::as_string(const std::string& key) const {
  if (type != GgufType::STRING) fail(key, ": expected STRING, found ", type_name(type));
  return str;
}

GgufFile::GgufFile(const std::string& path) : file_(path) {
  Reader r(file_.data(), file_.size(), path);
  r.need(4, "magic");
  TF_CHECK(std::memcmp(file_.data(), "GGUF", 4) == 0, path, ": not a GGUF file (bad magic)");
  r.read<uint32_t>("magic");
  version_ = r.read<uint32_t>("version");
  TF_CHECK(version_ != 1, path, ": GGUF version 1 is not supported (only versions 2 and 3)");
  TF_CHECK(version_ == 2 || version_ == 3, path, ": GGUF version ", version_,
           " is not supported (only versions 2 and 3; a big-endian file?)");
  const uint64_t n_tensors = r.read<uint64_t>("tensor_count");
  const uint64_t n_kv = r.read<uint64_t>("kv_count");
  // Each kv needs a key length, a value type and 1 byte; each tensor info a name length,
  // n_dims, type and offset. Checked apart first so the products cannot wrap.
  constexpr uint64_t kMinKv = 8 + 4 + 1, kMinTensor = 8 + 4 + 4 + 8;
  TF_CHECK(n_kv <= r.remaining() / kMinKv, path, ": kv_count ", n_kv, " cannot fit in the ",
           r.remaining(), " bytes left in the file");
  TF_CHECK(n_tensors <= r.remaining() / kMinTensor, path, ": tensor_count ", n_tensors,
           " cannot fit in the ", r.remaining(), " bytes left in the file");
  TF_CHECK(n_kv * kMinKv + n_tensors * kMinTensor <= r.remaining(), path, ": kv_count ", n_kv,
           " and tensor_count ", n_tensors, " cannot fit in the ", r.remaining(), " bytes left in the file");

  uint64_t elements = 0;
  for (uint64_t k = 0; k < n_kv; ++k) {
    std::string key = r.read_string(cat("metadata key #", k), kMaxKeyBytes);
    GgufType t = read_type(r, path, cat("key '", key, "' value type"));
    GgufValue v;
    read_value(r, v, t, 0, path, key, elements);
    TF_CHECK(!meta_.count(key), path, ": duplicate metadata key '", key, "'");
    meta_.emplace(std::move(key), std::move(v));
  }

  if (const GgufValue* a = find_meta("general.alignment")) {
    TF_CHECK(is_unsigned(a->type), path, ": general.alignment must be an unsigned integer, found ",
             type_name(a->type));
    TF_CHECK(a->u != 0 && (a->u & (a->u - 1)) == 0 && a->u <= kMaxAlignment, path,
             ": general.alignment ", a->u, " must be a power of two between 1 and ", kMaxAlignment);
    alignment_ = a->u;
  }

  struct Info {
    std::string name;
    std::vector<uint64_t> ne;
    DType dtype;
    uint64_t offset, nbytes;
  };
  std::vector<Info> infos;
  infos.reserve(n_tensors);
  std::set<std::string> seen;
  for (uint64_t k = 0; k < n_tensors; ++k) {
    Info info;
    info.name = r.read_string(cat("tensor #", k, " name"), kMaxTensorNameBytes);
    const std::string ctx = cat("tensor '", info.name, "'");
    TF_CHECK(seen.insert(info.name).second, path, ": duplicate ", ctx);
    uint32_t n_dims = r.read<uint32_t>(ctx + " n_dims");
    TF_CHECK(n_dims >= 1 && n_dims <= 4, path, ": ", ctx, ": n_dims ", n_dims, " is not between 1 and 4");
    // Zero dims are allowed, but the other dims' product must still fit so shape math never wraps.
    uint64_t numel = 1;
    bool empty = false;
    for (uint32_t d = 0; d < n_dims; ++d) {
      uint64_t ne = r.read<uint64_t>(ctx + " dimension");
      info.ne.push_back(ne);
      if (ne == 0) {
        empty = true;
        continue;
      }
      TF_CHECK(!__builtin_mul_overflow(numel, ne, &numel) && numel <= static_cast<uint64_t>(INT64_MAX),
               path, ": ", ctx, ": element count overflows at dimension ", d, " = ", ne);
    }
    if (empty) numel = 0;
    uint32_t type = r.read<uint32_t>(ctx + " type");
    switch (type) {
      case 0: info.dtype = DType::F32; break;
      case 1: info.dtype = DType::F16; break;
      case 8: info.dtype = DType::Q8_0; break;
      case 30: info.dtype = DType::BF16; break;
      default:
        if (const char* tn = ggml_type_name(type))
          fail(path, ": ", ctx, ": tensor type ", type, " (", tn, ") is not supported (F32, F16, Q8_0, BF16)");
        fail(path, ": ", ctx, ": unknown tensor type ", type, " (as signed: ", static_cast<int32_t>(type), ")");
    }
    TF_CHECK(info.dtype != DType::Q8_0 || info.ne[0] % kQ8Block == 0, path, ": ", ctx,
             ": Q8_0 row length ", info.ne[0], " is not a multiple of ", kQ8Block);
    uint64_t row = dtype_row_bytes(info.dtype, info.ne[0]);
    if (info.dtype != DType::Q8_0) {
      TF_CHECK(!__builtin_mul_overflow(info.ne[0], dtype_row_bytes(info.dtype, 1), &row), path, ": ", ctx,
               ": row size overflows");
    }
    uint64_t rows = info.ne[0] == 0 ? 0 : numel / info.ne[0];
    TF_CHECK(!__builtin_mul_overflow(row, rows, &info.nbytes), path, ": ", ctx, ": byte size overflows");
    info.offset = r.read<uint64_t>(ctx + " offset");
    TF_CHECK(info.offset % alignment_ == 0, path, ": ", ctx, ": offset ", info.offset,
             " is not a multiple of the alignment ", alignment_);
    infos.push_back(std::move(info));
  }

  uint64_t data_start = 0;
  TF_CHECK(!__builtin_add_overflow(r.pos(), alignment_ - 1, &data_start), path, ": data start overflows");
  data_start -= data_start % alignment_;
  if (!infos.empty())
    TF_CHECK(data_start <= file_.size(), path, ": tensor data would start at ", data_start,
             ", past the end of the file (", file_.size(), " bytes)");
  for (auto& info : infos) {
    uint64_t begin = 0, end = 0;
    TF_CHECK(!__builtin_add_overflow(data_start, info.offset, &begin) &&
                 !__builtin_add_overflow(begin, info.nbytes, &end) && end <= file_.size(),
             path, ": tensor '", info.name, "': data at offset ", info.offset, " + ", info.nbytes,
             " bytes runs past the end of the file (", file_.size() - data_start, " data bytes)");
    TensorView v;
    v.name = info.name;
    v.dtype = info.dtype;
    for (auto it = info.ne.rbegin(); it != info.ne.rend(); ++it) v.shape.push_back(static_cast<int64_t>(*it));
    v.data = file_.data() + begin;
    v.nbytes = info.nbytes;
    tensors_.emplace(info.name, std::move(v));
  }
}

const GgufValue* GgufFile::find_meta(const std::string& key) const {
  auto it = meta_.find(key);
  return it == meta_.end() ? nullptr : &it->second;
}

int64_t GgufFile::get_int(const std::string& key, int64_t fallback) const {
  const GgufValue* v = find_meta(key);
  return v ? v->as_int(cat(path(), ": ", key)) : fallback;
}

double GgufFile::get_float(const std::string& key, double fallback) const {
  const GgufValue* v = find_meta(key);
  return v ? v->as_float(cat(path(), ": ", key)) : fallback;
}

bool GgufFile::get_bool(const std::string& key, bool fallback) const {
  const GgufValue* v = find_meta(key);
  return v ? v->as_bool(cat(path(), ": ", key)) : fallback;
}

std::string GgufFile::get_string(const std::string& key, const std::string& fallback) const {
  const GgufValue* v = find_meta(key);
  return v ? v->as_string(cat(path(), ": ", key)) : fallback;
}

namespace {
const GgufValue* find_array(const GgufFile& g, const std::string& key) {
  const GgufValue* v = g.find_meta(key);
  if (v && v->type != GgufType::ARRAY) fail(g.path(), ": ", key, ": expected an array, found ", type_name(v->type));
  return v;
}
}  // namespace

std::vector<std::string> GgufFile::get_strings(const std::string& key) const {
  std::vector<std::string> out;
  const GgufValue* v = find_array(*this, key);
  if (!v) return out;
  out.reserve(v->arr.size());
  const std::string ctx = cat(path(), ": ", key, " element");
  for (const auto& e : v->arr) out.push_back(e.as_string(ctx));
  return out;
}

std::vector<double> GgufFile::get_floats(const std::string& key) const {
  std::vector<double> out;
  const GgufValue* v = find_array(*this, key);
  if (!v) return out;
  out.reserve(v->arr.size());
  const std::string ctx = cat(path(), ": ", key, " element");
  for (const auto& e : v->arr) out.push_back(e.as_float(ctx));
  return out;
}

std::vector<int64_t> GgufFile::get_ints(const std::string& key) const {
  std::vector<int64_t> out;
  const GgufValue* v = find_array(*this, key);
  if (!v) return out;
  out.reserve(v->arr.size());
  const std::string ctx = cat(path(), ": ", key, " element");
  for (const auto& e : v->arr) out.push_back(e.as_int(ctx));
  return out;
}

const TensorView* GgufFile::find(const std::string& name) const {
  auto it = tensors_.find(name);
  return it == tensors_.end() ? nullptr : &it->second;
}

std::vector<std::string> GgufFile::names() const {
  std::vector<std::string> out;
  out.reserve(tensors_.size());
  for (const auto& [name, v] : tensors_) out.push_back(name);
  return out;
}

}  // namespace tf
