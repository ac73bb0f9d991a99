#include <gtest/gtest.h>

#include <filesystem>
#include <random>

#include "formats/gguf.h"
#include "formats/gguf_weights.h"
#include "formats/hf_config.h"
#include "formats/model_files.h"
#include "test_formats_util.h"

namespace tf {
namespace {

using namespace tf::testing;

// A small valid file: every value type, a nested array, and F32/F16/Q8_0/BF16 tensors.
GgufBuilder valid_builder() {
  GgufBuilder g;
  g.kv_str("general.architecture", "llama");
  g.kv_raw("v.u8", kU8, {7});
  g.kv_raw("v.i8", kI8, {0xfe});
  g.kv_raw("v.u16", kU16, ByteWriter().put<uint16_t>(65535).b);
  g.kv_raw("v.i16", kI16, ByteWriter().put<int16_t>(-300).b);
  g.kv_u32("v.u32", 123456);
  g.kv_raw("v.i32", kI32, ByteWriter().put<int32_t>(-5).b);
  g.kv_f32("v.f32", 0.5f);
  g.kv_raw("v.bool", kBool, {1});
  g.kv_raw("v.u64", kU64, ByteWriter().u64(1ull << 40).b);
  g.kv_raw("v.i64", kI64, ByteWriter().put<int64_t>(-(1ll << 40)).b);
  g.kv_raw("v.f64", kF64, ByteWriter().put<double>(2.25).b);
  g.kv_strings("v.strings", {"a", "bc", ""});
  g.kv_raw("v.floats", kArray, ByteWriter().u32(kF32).u64(2).put(1.5f).put(-2.0f).b);
  // An array of two arrays of I32.
  g.kv_raw("v.nested", kArray,
           ByteWriter().u32(kArray).u64(2).u32(kI32).u64(1).put<int32_t>(4).u32(kI32).u64(0).b);
  g.tensor("f32", {3, 2}, 0, f32_bytes({0, 1, 2, 3, 4, 5}));
  g.tensor("f16", {2}, 1, ByteWriter().put<uint16_t>(0x3c00).put<uint16_t>(0xc000).b);
  Bytes q8;
  ByteWriter qw;
  qw.put<uint16_t>(0x3800);  // scale 0.5
  for (int i = 0; i < 32; ++i) qw.put<int8_t>(static_cast<int8_t>(i - 16));
  g.tensor("q8", {32, 1}, 8, qw.b);
  g.tensor("bf16", {1}, 30, ByteWriter().put<uint16_t>(0x4040).b);
  return g;
}

GgufFile load(const TempDir& dir, const Bytes& b, const std::string& name = "m.gguf") {
  write_bytes(dir.file(name), b);
  return GgufFile(dir.file(name));
}

void expect_bad(const Bytes& b, const std::string& needle) {
  TempDir dir;
  const std::string p = dir.file("bad.gguf");
  write_bytes(p, b);
  expect_error([&] { GgufFile g(p); }, p, needle);
}

TEST(FormatsGguf, LoadsEveryValueTypeAndTensorType) {
  TempDir dir;
  GgufFile g = load(dir, valid_builder().build());
  EXPECT_EQ(g.version(), 3u);
  EXPECT_EQ(g.alignment(), 32u);
  EXPECT_EQ(g.get_string("general.architecture", ""), "llama");
  EXPECT_EQ(g.get_int("v.u8", 0), 7);
  EXPECT_EQ(g.get_int("v.i8", 0), -2);
  EXPECT_EQ(g.get_int("v.u16", 0), 65535);
  EXPECT_EQ(g.get_int("v.i16", 0), -300);
  EXPECT_EQ(g.get_int("v.u32", 0), 123456);
  EXPECT_EQ(g.get_int("v.i32", 0), -5);
  EXPECT_EQ(g.get_float("v.f32", 0), 0.5);
  EXPECT_TRUE(g.get_bool("v.bool", false));
  EXPECT_EQ(g.get_int("v.u64", 0), 1ll << 40);
  EXPECT_EQ(g.get_int("v.i64", 0), -(1ll << 40));
  EXPECT_EQ(g.get_float("v.f64", 0), 2.25);
  EXPECT_EQ(g.get_strings("v.strings"), (std::vector<std::string>{"a", "bc", ""}));
  EXPECT_EQ(g.get_floats("v.floats"), (std::vector<double>{1.5, -2.0}));
  const GgufValue* nested = g.find_meta("v.nested");
  ASSERT_NE(nested, nullptr);
  ASSERT_EQ(nested->arr.size(), 2u);
  EXPECT_EQ(nested->arr[0].arr.at(0).as_int("x"), 4);
  EXPECT_TRUE(nested->arr[1].arr.empty());
  EXPECT_EQ(g.get_int("absent", 9), 9);
  EXPECT_TRUE(g.get_strings("absent").empty());

  EXPECT_EQ(g.names(), (std::vector<std::string>{"bf16", "f16", "f32", "q8"}));
  const TensorView& f32 = g.get("f32");
  EXPECT_EQ(f32.shape, (std::vector<int64_t>{2, 3}));  // GGUF ne [3, 2] reversed
  EXPECT_EQ(f32.nbytes, 24u);
  EXPECT_EQ(tensor_element(f32, 5), 5.0f);
  const TensorView& f16 = g.get("f16");
  EXPECT_EQ(f16.dtype, DType::F16);
  EXPECT_EQ(tensor_element(f16, 1), -2.0f);
  const TensorView& q8 = g.get("q8");
  EXPECT_EQ(q8.dtype, DType::Q8_0);
  EXPECT_EQ(q8.shape, (std::vector<int64_t>{1, 32}));
  EXPECT_EQ(q8.nbytes, 34u);
  EXPECT_EQ(tensor_element(q8, 0), -8.0f);
  EXPECT_EQ(tensor_element(q8, 31), 7.5f);
  EXPECT_EQ(tensor_element(g.get("bf16"), 0), 3.0f);
  EXPECT_EQ(reinterpret_cast<uintptr_t>(f32.data) % 32, 0u);
  EXPECT_EQ(g.total_bytes(), 24u + 4 + 34 + 2);
}

TEST(FormatsGguf, WrongTypeGettersNameTheKey) {
  TempDir dir;
  GgufFile g = load(dir, valid_builder().build());
  expect_error([&] { g.get_string("v.u32", ""); }, g.path(), "v.u32");
  expect_error([&] { g.get_bool("v.u8", false); }, g.path(), "v.u8");
  expect_error([&] { g.get_int("v.f32", 0); }, g.path(), "v.f32");
  expect_error([&] { g.get_strings("v.u32"); }, g.path(), "v.u32");
  expect_error([&] { g.get("nope"); }, g.path(), "'nope'");
}

TEST(FormatsGguf, Version2LoadsAndVersion1IsRejected) {
  TempDir dir;
  GgufBuilder g = valid_builder();
  g.version = 2;
  EXPECT_EQ(load(dir, g.build()).version(), 2u);
  g.version = 1;
  expect_bad(g.build(), "version 1 is not supported");
  g.version = 0x03000000;
  expect_bad(g.build(), "version 50331648");
  Bytes b = valid_builder().build();
  b[0] = 'X';
  expect_bad(b, "bad magic");
}

// BAD_INPUTS 1: a dimension of 2^42+1 whose size times stride wraps.
TEST(FormatsGguf, Bad1DimensionProductWraps) {
  GgufBuilder g;
  g.tensor("w", {(1ull << 42) + 1, 1ull << 22}, 0, f32_bytes({1}));
  expect_bad(g.build(), "tensor 'w': element count overflows");
  GgufBuilder h;
  h.tensor("w", {(1ull << 62) + 1}, 0, f32_bytes({1}));
  expect_bad(h.build(), "tensor 'w': row size overflows");
  GgufBuilder q;
  q.tensor("w", {1ull << 37, 1ull << 25}, 8, f32_bytes({1}));  // sizes fit but not in the file
  expect_bad(q.build(), "tensor 'w': data at offset 0 + 4899916394579099648 bytes runs past the end");
}

// BAD_INPUTS 2: a tensor count whose per-tensor overhead product overflows.
TEST(FormatsGguf, Bad2TensorCountOverheadOverflows) {
  GgufBuilder g = valid_builder();
  g.tensor_count_override = UINT64_MAX / 24 + 2;
  expect_bad(g.build(), "tensor_count");
  g.tensor_count_override = 1ull << 40;
  expect_bad(g.build(), "tensor_count 1099511627776 cannot fit");
}

// BAD_INPUTS 3: counts and lengths of 2^63 fail fast; a string longer than the file.
TEST(FormatsGguf, Bad3HugeCountsFailFast) {
  GgufBuilder g = valid_builder();
  g.kv_count_override = 1ull << 63;
  expect_bad(g.build(), "kv_count 9223372036854775808 cannot fit");
  GgufBuilder t = valid_builder();
  t.tensor_count_override = 1ull << 63;
  expect_bad(t.build(), "tensor_count");

  GgufBuilder s;
  s.kv_raw("k", kString, ByteWriter().u64(1ull << 63).raw({'x'}).b);
  expect_bad(s.build(), "of length 9223372036854775808");
  GgufBuilder s2;
  s2.kv_raw("k", kString, ByteWriter().u64(100).raw({'x', 'y'}).b);
  expect_bad(s2.build(), "key 'k' string of length 100 needs 100 bytes");
  GgufBuilder a;
  a.kv_raw("arr", kArray, ByteWriter().u32(kU8).u64(1ull << 63).b);
  expect_bad(a.build(), "key 'arr': array of 9223372036854775808 U8 elements cannot fit");
  GgufBuilder a2;
  a2.kv_raw("arr", kArray, ByteWriter().u32(kString).u64(4).u64(0).u64(0).u64(0).b);
  expect_bad(a2.build(), "key 'arr': array of 4 STRING elements cannot fit");
  GgufBuilder k;
  ByteWriter kw;
  kw.u64(1ull << 63);
  kw.b.resize(kw.b.size() + 40, 0);
  k.kvs.push_back(kw.b);
  expect_bad(k.build(), "metadata key #0 of length 9223372036854775808");
  GgufBuilder n;
  n.tensor("w", {1}, 0, f32_bytes({1}));
  Bytes b = n.build();
  std::memset(b.data() + 24, 0xff, 8);  // the tensor name length
  b[24 + 7] = 0x7f;
  expect_bad(b, "tensor #0 name of length");
}

// BAD_INPUTS 4: unknown or negative tensor types, bad general.alignment, duplicate keys.
TEST(FormatsGguf, Bad4TypesAlignmentDuplicates) {
  GgufBuilder g;
  g.tensor("w", {2}, 1000, f32_bytes({1, 2}));
  expect_bad(g.build(), "tensor 'w': unknown tensor type 1000");
  g.tensors[0].type = 0xffffffffu;
  expect_bad(g.build(), "tensor 'w': unknown tensor type 4294967295 (as signed: -1)");
  g.tensors[0].type = 2;
  expect_bad(g.build(), "tensor 'w': tensor type 2 (Q4_0) is not supported");

  auto with_alignment = [](uint32_t type, const Bytes& v, uint64_t layout = 32) {
    GgufBuilder a;
    a.alignment = layout;
    a.kv_raw("general.alignment", type, v);
    a.tensor("w", {1}, 0, f32_bytes({1}));
    return a.build();
  };
  expect_bad(with_alignment(kU32, ByteWriter().u32(0).b), "general.alignment 0 must be a power of two");
  expect_bad(with_alignment(kU32, ByteWriter().u32(48).b), "general.alignment 48 must be a power of two");
  expect_bad(with_alignment(kU32, ByteWriter().u32(1u << 21).b), "general.alignment 2097152");
  expect_bad(with_alignment(kF32, ByteWriter().put(32.0f).b), "general.alignment must be an unsigned integer, found F32");
  expect_bad(with_alignment(kI32, ByteWriter().put<int32_t>(32).b), "found I32");
  expect_bad(with_alignment(kString, ByteWriter().str("32").b), "found STRING");
  {
    TempDir dir;
    GgufFile ok = load(dir, with_alignment(kU64, ByteWriter().u64(64).b, 64));
    EXPECT_EQ(ok.alignment(), 64u);
  }

  GgufBuilder d = valid_builder();
  d.kv_u32("v.u32", 1);
  expect_bad(d.build(), "duplicate metadata key 'v.u32'");
  GgufBuilder dt;
  dt.tensor("w", {1}, 0, f32_bytes({1})).tensor("w", {1}, 0, f32_bytes({1}));
  expect_bad(dt.build(), "duplicate tensor 'w'");
  GgufBuilder vt;
  vt.kv_raw("k", 13, ByteWriter().u32(0).b);
  expect_bad(vt.build(), "key 'k' value type 13 is not a GGUF value type");
}

// BAD_INPUTS 5: offset plus size (and padding) arithmetic that would overflow.
TEST(FormatsGguf, Bad5OffsetPaddingOverflow) {
  GgufBuilder g;
  g.tensor("w", {8}, 0, f32_bytes({1, 2, 3, 4, 5, 6, 7, 8}));
  g.tensors[0].offset_override = UINT64_MAX - 31;  // aligned, + size wraps
  expect_bad(g.build(), "tensor 'w': data at offset 18446744073709551584");
  g.tensors[0].offset_override = 64;
  expect_bad(g.build(), "runs past the end of the file");
  g.tensors[0].offset_override = 4;
  expect_bad(g.build(), "offset 4 is not a multiple of the alignment 32");
  // The header ends where padding to 1 MiB would pass the end of the file.
  GgufBuilder p;
  p.kv_raw("general.alignment", kU32, ByteWriter().u32(1u << 20).b);
  p.tensor("w", {1}, 0, f32_bytes({1}));
  expect_bad(p.build(), "tensor data would start at 1048576, past the end of the file");
}

// BAD_INPUTS 6: arrays declared as one element type and read as another; unbounded vocabularies.
TEST(FormatsGguf, Bad6ArrayTypeConfusionAndHugeVocab) {
  TempDir dir;
  GgufBuilder g = valid_builder();
  g.kv_raw("tokenizer.ggml.tokens", kArray, ByteWriter().u32(kU32).u64(2).u32(1).u32(2).b);
  GgufFile f = load(dir, g.build());
  expect_error([&] { f.get_strings("tokenizer.ggml.tokens"); }, f.path(), "tokenizer.ggml.tokens element: expected STRING, found U32");
  expect_error([&] { f.get_ints("v.strings"); }, f.path(), "v.strings element: expected an integer");

  GgufBuilder v;
  v.kv_raw("tokenizer.ggml.tokens", kArray, ByteWriter().u32(kString).u64(1ull << 40).str("a").b);
  expect_bad(v.build(), "key 'tokenizer.ggml.tokens': array of 1099511627776 STRING elements cannot fit");
  // Within the file's bytes but past the parser's element budget.
  GgufBuilder big;
  ByteWriter bw;
  bw.u32(kU8).u64((1ull << 22) + 1);
  bw.b.resize(bw.b.size() + (1ull << 22) + 1, 0);
  big.kv_raw("huge", kArray, bw.b);
  expect_bad(big.build(), "passes the metadata limit");
  GgufBuilder deep;
  ByteWriter dw;
  for (int i = 0; i < 5; ++i) dw.u32(kArray).u64(1);
  dw.u32(kU8).u64(1).u8(0);
  deep.kv_raw("deep", kArray, dw.b);
  expect_bad(deep.build(), "key 'deep': arrays nest deeper than 4");
  GgufBuilder badbool;
  badbool.kv_raw("b", kBool, {2});
  expect_bad(badbool.build(), "key 'b': BOOL value 2");
}

// BAD_INPUTS 7: a block count far past what any layer table could hold.
TEST(FormatsGguf, Bad7HugeBlockCount) {
  TempDir dir;
  GgufBuilder g;
  g.kv_str("general.architecture", "llama");
  g.kv_u32("llama.embedding_length", 8).kv_u32("llama.attention.head_count", 2);
  g.kv_raw("llama.block_count", kU64, ByteWriter().u64(1ull << 40).b);
  g.tensor("token_embd.weight", {8, 4}, 0, f32_bytes(std::vector<float>(32, 0.f)));
  write_bytes(dir.file("m.gguf"), g.build());
  expect_error([&] { open_model(dir.file("m.gguf")); }, dir.file("m.gguf"), "num_hidden_layers");
}

// The hybrid architectures size per-layer tables by block_count: a huge or negative one is a clear
// error naming the key, before anything is allocated.
TEST(FormatsGguf, Bad7HugeBlockCountHybrid) {
  for (const std::string a : {"nemotron_h", "qwen3next", "qwen35"}) {
    for (const int64_t n : {int64_t(1) << 40, int64_t(1) << 28, int64_t(-1), int64_t(0)}) {
      TempDir dir;
      GgufBuilder g;
      g.kv_str("general.architecture", a);
      g.kv_raw(a + ".block_count", kI64, ByteWriter().put<int64_t>(n).b);
      g.kv_u32(a + ".embedding_length", 8).kv_u32(a + ".attention.head_count", 2);
      g.kv_u32(a + ".attention.head_count_kv", 1).kv_u32(a + ".ssm.group_count", 1);
      g.kv_u32(a + ".ssm.time_step_rank", 1).kv_u32(a + ".ssm.state_size", 1);
      g.kv_u32(a + ".ssm.inner_size", 1);
      g.tensor("token_embd.weight", {8, 4}, 0, f32_bytes(std::vector<float>(32, 0.f)));
      write_bytes(dir.file("m.gguf"), g.build());
      SCOPED_TRACE(a + " block_count " + std::to_string(n));
      expect_error([&] { open_model(dir.file("m.gguf")); }, dir.file("m.gguf"), "block_count' is");
    }
  }
}

TEST(FormatsGguf, TensorInfoChecks) {
  GgufBuilder g;
  g.tensor("w", {}, 0, {});
  expect_bad(g.build(), "tensor 'w': n_dims 0");
  g.tensors[0].ne = {1, 1, 1, 1, 1};
  expect_bad(g.build(), "tensor 'w': n_dims 5");
  GgufBuilder q;
  q.tensor("q", {16, 2}, 8, Bytes(34, 0));
  expect_bad(q.build(), "tensor 'q': Q8_0 row length 16");
  GgufBuilder n;
  n.tensor(std::string(5000, 'n'), {1}, 0, f32_bytes({1}));
  expect_bad(n.build(), "exceeds the limit 4096");
  // An empty tensor is fine; its view has no bytes.
  TempDir dir;
  GgufBuilder e;
  e.tensor("empty", {0, 4}, 0, {});
  GgufFile f = load(dir, e.build());
  EXPECT_EQ(f.get("empty").numel(), 0);
  EXPECT_EQ(f.get("empty").nbytes, 0u);
}

TEST(FormatsGguf, EveryTruncationIsAnError) {
  TempDir dir;
  const Bytes full = valid_builder().build();
  const std::string p = dir.file("t.gguf");
  for (size_t n = 0; n < full.size(); ++n) {
    write_bytes(p, Bytes(full.begin(), full.begin() + static_cast<long>(n)));
    try {
      GgufFile g(p);
      ADD_FAILURE() << "truncated to " << n << " of " << full.size() << " bytes still loads";
    } catch (const Error& e) {
      ASSERT_NE(std::string(e.what()).find(p), std::string::npos) << e.what();
    }
  }
}

TEST(FormatsGguf, RandomByteCorruptionLoadsOrThrows) {
  TempDir dir;
  const Bytes full = valid_builder().build();
  const std::string p = dir.file("c.gguf");
  std::mt19937 rng(1234);
  int loaded = 0, rejected = 0;
  for (int iter = 0; iter < 1500; ++iter) {
    Bytes b = full;
    size_t pos = rng() % b.size();
    b[pos] = static_cast<uint8_t>(rng());
    write_bytes(p, b);
    try {
      GgufFile g(p);
      for (const auto& n : g.names()) (void)g.get(n).nbytes;
      ++loaded;
    } catch (const Error&) {
      ++rejected;
    }
  }
  EXPECT_GT(rejected, 0);
  EXPECT_GT(loaded, 0);
}

// Qwen3-MoE style file: expert tensors split per expert, names mapped, config synthesized.
TEST(FormatsGguf, MoeExpertsSplitIntoHfNames) {
  TempDir dir;
  GgufBuilder g;
  g.kv_str("general.architecture", "qwen3moe");
  g.kv_u32("qwen3moe.embedding_length", 4).kv_u32("qwen3moe.block_count", 1);
  g.kv_u32("qwen3moe.attention.head_count", 2).kv_u32("qwen3moe.attention.head_count_kv", 1);
  g.kv_u32("qwen3moe.attention.key_length", 2).kv_u32("qwen3moe.expert_count", 3);
  g.kv_u32("qwen3moe.expert_used_count", 2).kv_u32("qwen3moe.expert_feed_forward_length", 2);
  g.kv_f32("qwen3moe.rope.freq_base", 1000000.f);
  g.kv_strings("tokenizer.ggml.tokens", {"a", "b", "c", "d", "e"});
  g.kv_u32("tokenizer.ggml.eos_token_id", 4);
  std::vector<float> exps(3 * 2 * 4);
  for (size_t i = 0; i < exps.size(); ++i) exps[i] = float(i);
  g.tensor("token_embd.weight", {4, 5}, 0, f32_bytes(std::vector<float>(20, 1.f)));
  g.tensor("blk.0.ffn_gate_exps.weight", {4, 2, 3}, 0, f32_bytes(exps));
  g.tensor("blk.0.attn_q.bias", {4}, 0, f32_bytes({0, 0, 0, 0}));
  g.tensor("blk.0.attn_k_norm.weight", {2}, 0, f32_bytes({1, 1}));
  g.tensor("blk.0.ffn_gate_inp.weight", {4, 3}, 0, f32_bytes(std::vector<float>(12, 0.f)));
  g.tensor("rope_freqs.weight", {2}, 0, f32_bytes({1, 1}));
  write_bytes(dir.file("moe.gguf"), g.build());
  ModelFiles mf = open_model(dir.file("moe.gguf"));
  const WeightSource& w = *mf.weights;
  for (int e = 0; e < 3; ++e) {
    const TensorView& t = w.get("model.layers.0.mlp.experts." + std::to_string(e) + ".gate_proj.weight");
    EXPECT_EQ(t.shape, (std::vector<int64_t>{2, 4}));
    EXPECT_EQ(t.nbytes, 32u);
    EXPECT_EQ(tensor_element(t, 0), float(e * 8));
    EXPECT_EQ(tensor_element(t, 7), float(e * 8 + 7));
  }
  EXPECT_NE(w.find("model.layers.0.self_attn.q_proj.bias"), nullptr);
  EXPECT_NE(w.find("model.layers.0.self_attn.k_norm.weight"), nullptr);
  EXPECT_NE(w.find("model.layers.0.mlp.gate.weight"), nullptr);
  EXPECT_NE(w.find("rope_freqs.weight"), nullptr);  // unknown names pass through
  EXPECT_EQ(w.find("blk.0.ffn_gate_exps.weight"), nullptr);
  EXPECT_EQ(mf.config["architectures"][0], "Qwen3MoeForCausalLM");
  EXPECT_EQ(mf.config["tf_rope_interleaved"], false);
  EXPECT_EQ(mf.config["tie_word_embeddings"], true);
  HfConfig c = parse_hf_config(mf.config, "moe");
  EXPECT_EQ(c.num_experts, 3);
  EXPECT_EQ(c.num_experts_per_tok, 2);
  EXPECT_EQ(c.moe_intermediate_size, 2);
  EXPECT_EQ(c.head_dim, 2);
  EXPECT_EQ(c.vocab_size, 5);
  EXPECT_EQ(c.rope.theta, 1000000.0);
  EXPECT_TRUE(c.attention_bias);
  EXPECT_EQ(c.eos_token_ids, (std::vector<int64_t>{4}));
}

TEST(FormatsGguf, UnsupportedArchitectureIsNamed) {
  TempDir dir;
  GgufBuilder g;
  g.kv_str("general.architecture", "mamba");
  write_bytes(dir.file("m.gguf"), g.build());
  expect_error([&] { open_model(dir.file("m.gguf")); }, dir.file("m.gguf"),
               "'mamba' is not supported (llama, qwen2, qwen3, qwen3moe)");
  EXPECT_EQ(gguf_to_hf_name("blk.12.ffn_down.bias"), "model.layers.12.mlp.down_proj.bias");
  EXPECT_EQ(gguf_to_hf_name("blk.x.ffn_down.bias"), "blk.x.ffn_down.bias");
}

const std::string kTinyLlama = std::string(TF_SHARED_DIR) + "/models/llama-2-tiny-random.gguf";

TEST(FormatsGguf, SharedTinyLlama) {
  if (!std::filesystem::exists(kTinyLlama)) GTEST_SKIP() << "absent: " << kTinyLlama;
  GgufFile g(kTinyLlama);
  EXPECT_EQ(g.version(), 3u);
  EXPECT_EQ(g.names().size(), 12u);
  EXPECT_EQ(g.get_string("general.architecture", ""), "llama");
  EXPECT_EQ(g.get_int("llama.embedding_length", 0), 8);
  std::vector<std::string> tokens = g.get_strings("tokenizer.ggml.tokens");
  ASSERT_EQ(tokens.size(), 32000u);
  EXPECT_EQ(tokens[1], "<s>");
  EXPECT_EQ(g.get_floats("tokenizer.ggml.scores").size(), 32000u);
  const TensorView& emb = g.get("token_embd.weight");
  EXPECT_EQ(emb.dtype, DType::F16);
  EXPECT_EQ(emb.shape, (std::vector<int64_t>{32000, 8}));
  EXPECT_EQ(emb.nbytes, 32000u * 8 * 2);
  const TensorView& down = g.get("blk.0.ffn_down.weight");
  EXPECT_EQ(down.shape, (std::vector<int64_t>{8, 32}));
  // Values as the gguf Python package reads them.
  EXPECT_EQ(tensor_element(down, 0), 0.0207366943359375f);
  EXPECT_EQ(tensor_element(down, 1), -0.007080078125f);
  EXPECT_EQ(g.get("blk.0.attn_norm.weight").dtype, DType::F32);

  ModelFiles mf = open_model(kTinyLlama);
  ASSERT_TRUE(mf.gguf);
  HfConfig c = parse_hf_config(mf.config, kTinyLlama);
  EXPECT_EQ(c.hidden_size, 8);
  EXPECT_EQ(c.num_hidden_layers, 1);
  EXPECT_EQ(c.num_attention_heads, 2);
  EXPECT_EQ(c.head_dim, 4);
  EXPECT_EQ(c.intermediate_size, 32);
  EXPECT_EQ(c.vocab_size, 32000);
  EXPECT_EQ(c.max_position_embeddings, 4096);
  EXPECT_FLOAT_EQ(static_cast<float>(c.rms_norm_eps), 1e-5f);
  EXPECT_FALSE(c.tie_word_embeddings);
  EXPECT_EQ(c.bos_token_ids, (std::vector<int64_t>{1}));
  EXPECT_EQ(c.architecture, "LlamaForCausalLM");
  EXPECT_EQ(mf.config["tf_rope_interleaved"], true);
  EXPECT_EQ(mf.weights->get("model.embed_tokens.weight").data, mf.gguf->get("token_embd.weight").data);
  EXPECT_EQ(mf.weights->get("model.layers.0.mlp.down_proj.weight").data, mf.gguf->get("blk.0.ffn_down.weight").data);
  for (const char* n : {"lm_head.weight", "model.norm.weight", "model.layers.0.input_layernorm.weight",
                        "model.layers.0.self_attn.o_proj.weight", "model.layers.0.post_attention_layernorm.weight"})
    EXPECT_NE(mf.weights->find(n), nullptr) << n;
  EXPECT_EQ(mf.weights->names().size(), 12u);
  EXPECT_EQ(mf.weights->total_bytes(), g.total_bytes());
}

}  // namespace
}  // namespace tf
