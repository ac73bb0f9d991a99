#include <gtest/gtest.h>

#include <random>

#include "formats/model_files.h"
#include "formats/safetensors.h"
#include "test_formats_util.h"

namespace tf {
namespace {

using namespace tf::testing;

const char* kValidHeader =
    R"({"__metadata__":{"format":"pt"},)"
    R"("a":{"dtype":"F32","shape":[2,2],"data_offsets":[0,16]},)"
    R"("empty":{"dtype":"F16","shape":[0,3],"data_offsets":[16,16]},)"
    R"("b":{"dtype":"BF16","shape":[3],"data_offsets":[16,22]},)"
    R"("c":{"dtype":"I64","shape":[],"data_offsets":[22,30]}})";

Bytes valid_data() {
  Bytes d = f32_bytes({1, 2, 3, 4});
  for (uint16_t h : {0x3f80, 0x4000, 0xc040}) d.push_back(h & 0xff), d.push_back(h >> 8);
  ByteWriter w;
  w.put<int64_t>(-7);
  d.insert(d.end(), w.b.begin(), w.b.end());
  return d;
}

void expect_bad(const Bytes& b, const std::string& needle) {
  TempDir dir;
  const std::string p = dir.file("bad.safetensors");
  write_bytes(p, b);
  expect_error([&] { SafetensorsFile f(p); }, p, needle);
}

// A one-tensor file whose entry for "t" is `entry`, followed by `data_bytes` zero bytes.
Bytes one_tensor(const std::string& entry, size_t data_bytes) {
  return safetensors_bytes(R"({"t":)" + entry + "}", Bytes(data_bytes, 0));
}

TEST(FormatsSafetensors, LoadsViews) {
  TempDir dir;
  write_bytes(dir.file("x.safetensors"), safetensors_bytes(kValidHeader, valid_data()));
  SafetensorsFile f(dir.file("x.safetensors"));
  ASSERT_EQ(f.tensors().size(), 4u);
  const TensorView& a = f.tensors().at("a");
  EXPECT_EQ(a.dtype, DType::F32);
  EXPECT_EQ(a.shape, (std::vector<int64_t>{2, 2}));
  EXPECT_EQ(tensor_element(a, 3), 4.0f);
  const TensorView& b = f.tensors().at("b");
  EXPECT_EQ(b.dtype, DType::BF16);
  EXPECT_EQ(tensor_element(b, 2), -3.0f);
  const TensorView& c = f.tensors().at("c");
  EXPECT_TRUE(c.shape.empty());
  int64_t v;
  std::memcpy(&v, c.data, 8);
  EXPECT_EQ(v, -7);
  EXPECT_EQ(f.tensors().at("empty").numel(), 0);
  EXPECT_EQ(f.tensors().at("empty").nbytes, 0u);
}

TEST(FormatsSafetensors, HeaderPaddedWithSpacesLoads) {
  TempDir dir;
  std::string h = R"({"t":{"dtype":"U8","shape":[2],"data_offsets":[0,2]}})";
  h += "       ";
  write_bytes(dir.file("p.safetensors"), safetensors_bytes(h, {1, 2}));
  SafetensorsFile f(dir.file("p.safetensors"));
  EXPECT_EQ(f.tensors().at("t").data[1], 2);
}

TEST(FormatsSafetensors, UnsupportedDtypeNamesTensorAndDtype) {
  expect_bad(one_tensor(R"({"dtype":"F8_E4M3","shape":[1],"data_offsets":[0,1]})", 1),
             "tensor 't': dtype 'F8_E4M3' is not supported");
}

// BAD_INPUTS 9: header length bounds, non-object JSON, invalid UTF-8.
TEST(FormatsSafetensors, Bad9HeaderLengthAndEncoding) {
  expect_bad({1, 2, 3}, "too short for the 8-byte header length");
  expect_bad(ByteWriter().u64((100ull << 20) + 1).raw({'{', '}'}).b, "header length 104857601 exceeds the 100 MB limit");
  expect_bad(ByteWriter().u64(1ull << 63).b, "exceeds the 100 MB limit");
  expect_bad(ByteWriter().u64(0).b, "header length 0 is too small");
  expect_bad(ByteWriter().u64(1).raw({'{'}).b, "header length 1 is too small");
  expect_bad(ByteWriter().u64(50).raw({'{', '}'}).b, "header length 50 exceeds the file size 10");
  expect_bad(safetensors_bytes("[1,2]", {}), "header is not a JSON object");
  expect_bad(safetensors_bytes("\"text\"", {}), "header is not a JSON object");
  expect_bad(safetensors_bytes("{\"a\":", {}), "header is not valid JSON");
  expect_bad(safetensors_bytes("{} x", {}), "header is not valid JSON");
  expect_bad(safetensors_bytes("{\"\xff\":1}", {}), "header is not valid UTF-8 (byte 2)");
  expect_bad(safetensors_bytes("{\"\xc0\xaf\":1}", {}), "not valid UTF-8");        // overlong '/'
  expect_bad(safetensors_bytes("{\"\xed\xa0\x80\":1}", {}), "not valid UTF-8");    // surrogate
  expect_bad(safetensors_bytes("{\"a\":{\"b\":{\"c\":{\"d\":{\"e\":1}}}}}", {}), "nests deeper");
  expect_bad(safetensors_bytes(R"({"__metadata__":{"k":1}})", {}), "__metadata__ entry 'k' is not a string");
  expect_bad(safetensors_bytes(R"({"__metadata__":[]})", {}), "__metadata__ must be an object");
}

// BAD_INPUTS 10: offsets against shape x dtype, reversed, overlapping, leaving holes.
TEST(FormatsSafetensors, Bad10Offsets) {
  expect_bad(one_tensor(R"({"dtype":"F32","shape":[2],"data_offsets":[0,4]})", 4),
             "tensor 't': data_offsets span 4 bytes but shape [2] of F32 needs 8");
  expect_bad(one_tensor(R"({"dtype":"U8","shape":[0],"data_offsets":[4,0]})", 4),
             "tensor 't': data_offsets end 0 is before begin 4");
  expect_bad(one_tensor(R"({"dtype":"U8","shape":[8],"data_offsets":[0,8]})", 4),
             "tensor 't': data_offsets end 8 is past the data buffer (4 bytes)");
  expect_bad(one_tensor(R"({"dtype":"U8","shape":[4],"data_offsets":[0,4]})", 6),
             "bytes [4, 6) at the end of the data buffer belong to no tensor");
  expect_bad(one_tensor(R"({"dtype":"U8","shape":[4],"data_offsets":[2,6]})", 6),
             "bytes [0, 2) of the data buffer belong to no tensor (before 't')");
  expect_bad(safetensors_bytes(R"({"x":{"dtype":"U8","shape":[4],"data_offsets":[0,4]},)"
                               R"("y":{"dtype":"U8","shape":[4],"data_offsets":[2,6]}})", Bytes(6, 0)),
             "tensor 'y' [2, 6) overlaps tensor 'x'");
  expect_bad(one_tensor(R"({"dtype":"U8","shape":[4],"data_offsets":[-1,3]})", 4),
             "data_offsets[0] must be a non-negative integer");
  expect_bad(one_tensor(R"({"dtype":"U8","shape":[4],"data_offsets":[0,4.0]})", 4),
             "data_offsets[1] must be a non-negative integer");
  expect_bad(one_tensor(R"({"dtype":"U8","shape":[4],"data_offsets":[0]})", 4), "must be an array [begin, end]");
  expect_bad(one_tensor(R"({"dtype":"U8","shape":[-4],"data_offsets":[0,4]})", 4), "shape entry must be a non-negative");
  expect_bad(one_tensor(R"({"dtype":"F32","shape":[1099511627776,1099511627776],"data_offsets":[0,4]})", 4),
             "overflows the element count");
  expect_bad(one_tensor(R"({"dtype":"F64","shape":[4611686018427387904],"data_offsets":[0,4]})", 4),
             "overflows the byte count");
  expect_bad(one_tensor(R"({"dtype":"U8","shape":[4]})", 4), "'data_offsets' must be an array");
  expect_bad(one_tensor(R"({"shape":[4],"data_offsets":[0,4]})", 4), "missing string field 'dtype'");
  expect_bad(one_tensor(R"({"dtype":"U8","shape":[4],"data_offsets":[0,4],"x":1})", 4), "unknown field 'x'");
  expect_bad(one_tensor("[1]", 4), "tensor 't': entry is not an object");
}

// BAD_INPUTS 11: zero-size tensors inside another's bytes; duplicate names.
TEST(FormatsSafetensors, Bad11ZeroSizeReuseAndDuplicates) {
  expect_bad(safetensors_bytes(R"({"x":{"dtype":"U8","shape":[4],"data_offsets":[0,4]},)"
                               R"("z":{"dtype":"U8","shape":[0],"data_offsets":[2,2]}})", Bytes(4, 0)),
             "tensor 'z' [2, 2) overlaps tensor 'x'");
  expect_bad(safetensors_bytes(R"({"x":{"dtype":"U8","shape":[4],"data_offsets":[0,4]},)"
                               R"("x":{"dtype":"U8","shape":[4],"data_offsets":[4,8]}})", Bytes(8, 0)),
             "duplicate key 'x' in header");
  expect_bad(one_tensor(R"({"dtype":"U8","dtype":"F32","shape":[4],"data_offsets":[0,4]})", 4),
             "duplicate key 'dtype'");
  // A zero-size tensor at a tensor boundary owns no bytes, as safetensors itself accepts.
  TempDir dir;
  write_bytes(dir.file("z.safetensors"),
              safetensors_bytes(R"({"x":{"dtype":"U8","shape":[4],"data_offsets":[0,4]},)"
                                R"("z":{"dtype":"U8","shape":[0],"data_offsets":[0,0]}})", Bytes(4, 0)));
  SafetensorsFile f(dir.file("z.safetensors"));
  EXPECT_EQ(f.tensors().at("z").nbytes, 0u);
}

TEST(FormatsSafetensors, EveryTruncationIsAnError) {
  TempDir dir;
  const Bytes full = safetensors_bytes(kValidHeader, valid_data());
  const std::string p = dir.file("t.safetensors");
  for (size_t n = 0; n < full.size(); ++n) {
    write_bytes(p, Bytes(full.begin(), full.begin() + static_cast<long>(n)));
    try {
      SafetensorsFile f(p);
      ADD_FAILURE() << "truncated to " << n << " bytes still loads";
    } catch (const Error& e) {
      ASSERT_NE(std::string(e.what()).find(p), std::string::npos) << e.what();
    }
  }
}

TEST(FormatsSafetensors, RandomByteCorruptionLoadsOrThrows) {
  TempDir dir;
  const Bytes full = safetensors_bytes(kValidHeader, valid_data());
  const std::string p = dir.file("c.safetensors");
  std::mt19937 rng(99);
  int loaded = 0, rejected = 0;
  for (int iter = 0; iter < 1500; ++iter) {
    Bytes b = full;
    b[rng() % b.size()] = static_cast<uint8_t>(rng());
    write_bytes(p, b);
    try {
      SafetensorsFile f(p);
      ++loaded;
    } catch (const Error&) {
      ++rejected;
    }
  }
  EXPECT_GT(loaded, 0);
  EXPECT_GT(rejected, 0);
}

Bytes tensor_file(const std::string& name, float value) {
  return safetensors_bytes(R"({")" + name + R"(":{"dtype":"F32","shape":[1],"data_offsets":[0,4]}})",
                           f32_bytes({value}));
}

TEST(FormatsSafetensors, SetFromIndexSingleFileAndGlob) {
  {
    TempDir dir;
    write_bytes(dir.file("model.safetensors"), tensor_file("w", 1));
    write_bytes(dir.file("other.safetensors"), tensor_file("ignored", 2));
    SafetensorsSet s(dir.path());
    EXPECT_EQ(s.names(), std::vector<std::string>{"w"});
    EXPECT_EQ(s.total_bytes(), 4u);
    expect_error([&] { s.get("missing"); }, dir.path(), "tensor 'missing' is missing");
  }
  {
    TempDir dir;
    write_bytes(dir.file("a.safetensors"), tensor_file("x", 1));
    write_bytes(dir.file("b.safetensors"), tensor_file("y", 2));
    write_text(dir.file("model.safetensors.index.json"),
               R"({"metadata":{},"weight_map":{"x":"a.safetensors","y":"b.safetensors"}})");
    SafetensorsSet s(dir.path());
    EXPECT_EQ(s.names(), (std::vector<std::string>{"x", "y"}));
    EXPECT_EQ(tensor_element(s.get("y"), 0), 2.0f);
  }
  {
    TempDir dir;
    write_bytes(dir.file("s1.safetensors"), tensor_file("x", 1));
    write_bytes(dir.file("s2.safetensors"), tensor_file("y", 2));
    SafetensorsSet s(dir.path());
    EXPECT_EQ(s.names().size(), 2u);
  }
}

TEST(FormatsSafetensors, SetRejectsBadIndexesAndDuplicates) {
  TempDir dir;
  write_bytes(dir.file("a.safetensors"), tensor_file("x", 1));
  const std::string idx = dir.file("model.safetensors.index.json");
  for (const char* shard : {"../a.safetensors", "/etc/passwd", "sub/a.safetensors", "..", ""}) {
    write_text(idx, std::string(R"({"weight_map":{"x":")") + shard + "\"}}");
    expect_error([&] { SafetensorsSet s(dir.path()); }, idx, "is not a plain file name");
  }
  write_text(idx, R"({"weight_map":{"x":"a.safetensors","q":"a.safetensors"}})");
  expect_error([&] { SafetensorsSet s(dir.path()); }, idx, "tensor 'q' is not in shard a.safetensors");
  write_text(idx, R"({"weight_map":{"x":"missing.safetensors"}})");
  expect_error([&] { SafetensorsSet s(dir.path()); }, "missing.safetensors", "cannot open");
  write_text(idx, R"({"weight_map":[]})");
  expect_error([&] { SafetensorsSet s(dir.path()); }, idx, "missing object 'weight_map'");
  write_text(idx, R"({"weight_map":)");
  expect_error([&] { SafetensorsSet s(dir.path()); }, idx, "invalid JSON");
  std::filesystem::remove(idx);
  write_bytes(dir.file("b.safetensors"), tensor_file("x", 2));
  expect_error([&] { SafetensorsSet s(dir.path()); }, dir.path(), "tensor 'x' appears in both");
  TempDir empty;
  expect_error([&] { SafetensorsSet s(empty.path()); }, empty.path(), "no *.safetensors files");
}

TEST(FormatsSafetensors, OpenModelFolder) {
  TempDir dir;
  write_bytes(dir.file("model.safetensors"), tensor_file("w", 1));
  expect_error([&] { open_model(dir.path()); }, dir.path(), "config.json is missing");
  write_text(dir.file("config.json"), R"({"hidden_size": 8})");
  write_text(dir.file("tokenizer.json"), R"({"model": {}})");
  ModelFiles mf = open_model(dir.path());
  EXPECT_EQ(mf.config["hidden_size"], 8);
  EXPECT_TRUE(mf.tokenizer_json.is_object());
  EXPECT_TRUE(mf.generation_config.is_object() && mf.generation_config.empty());
  EXPECT_TRUE(mf.tokenizer_config.is_object());
  EXPECT_FALSE(mf.gguf);
  EXPECT_NE(mf.weights->find("w"), nullptr);
  write_text(dir.file("generation_config.json"), "{oops");
  expect_error([&] { open_model(dir.path()); }, dir.file("generation_config.json"), "invalid JSON");
  expect_error([&] { open_model(dir.file("nothing")); }, dir.file("nothing"), "no such model folder or file");
  expect_error([&] { open_model(dir.file("config.json")); }, dir.file("config.json"), "not a model folder or a .gguf file");
  expect_error([&] { read_json_file(dir.file("config.json"), 4); }, dir.file("config.json"), "over the limit of 4");
}

}  // namespace
}  // namespace tf
