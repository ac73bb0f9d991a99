#include <gtest/gtest.h>

#include <chrono>
#include <filesystem>
#include <random>
#include <thread>

#include "base/error.h"
#include "formats/model_files.h"
#include "tokenizer/hf_tokenizer.h"
#include "tokenizer/pre_tokenizer.h"
#include "tokenizer/spm_tokenizer.h"
#include "tokenizer/tokenizer.h"
#include "tokenizer/utf8.h"

namespace tf {
namespace {

using nlohmann::json;

// A GPT-2 style byte-level BPE: all 256 byte symbols, a few merges, two added tokens.
json byte_level_json(json merges = json::array({"h e", "l l", "he ll", "hell o", "\xC4\xA0 w", "o r"})) {
  json vocab = json::object();
  for (int b = 0; b < 256; ++b) vocab[byte_to_unicode(static_cast<unsigned char>(b))] = b;
  int next = 256;
  for (const auto& m : merges) {
    const std::string s = m.get<std::string>();
    const size_t sp = s.find(' ');
    vocab[s.substr(0, sp) + s.substr(sp + 1)] = next++;
  }
  json added = json::array({
      {{"id", 1000}, {"content", "<|end|>"}, {"special", true}, {"normalized", false}},
      {{"id", 1001}, {"content", "<mask>"}, {"special", true}, {"normalized", false}, {"lstrip", true}}});
  return {{"model", {{"type", "BPE"}, {"vocab", vocab}, {"merges", merges}}},
          {"pre_tokenizer", {{"type", "ByteLevel"}, {"add_prefix_space", false}, {"use_regex", true}}},
          {"decoder", {{"type", "ByteLevel"}}},
          {"added_tokens", added},
          {"post_processor", {{"type", "TemplateProcessing"},
                              {"single", json::array({{{"SpecialToken", {{"id", "<|end|>"}}}}, {{"Sequence", {{"id", "A"}}}}})},
                              {"special_tokens", {{"<|end|>", {{"ids", {1000}}}}}}}}};
}

std::vector<std::string> pieces(const Tokenizer& t, const std::vector<int32_t>& ids) {
  std::vector<std::string> out;
  for (int32_t id : ids) out.push_back(t.token_piece(id));
  return out;
}

TEST(Tokenizer, ByteLevelPiecesAndMerges) {
  HfTokenizer t(byte_level_json(), "test");
  const auto ids = t.encode("hello world", false);
  EXPECT_EQ(pieces(t, ids), (std::vector<std::string>{"hello", "\xC4\xA0w", "or", "l", "d"}));
  EXPECT_EQ(t.decode(ids, false), "hello world");
  // Non-ASCII bytes map to their GPT-2 code points, one token per byte without merges.
  EXPECT_EQ(t.encode("\xC3\xA9", false), (std::vector<int32_t>{0xC3, 0xA9}));
}

TEST(Tokenizer, MergeRankBeatsPosition) {
  // "b c" has the better rank, so "abc" becomes a + bc even though "a b" is leftmost.
  HfTokenizer t(byte_level_json(json::array({"b c", "a b"})), "test");
  EXPECT_EQ(pieces(t, t.encode("abc", false)), (std::vector<std::string>{"a", "bc"}));
  EXPECT_EQ(pieces(t, t.encode("abab", false)), (std::vector<std::string>{"ab", "ab"}));
}

TEST(Tokenizer, AddedTokensAndPostProcessor) {
  HfTokenizer t(byte_level_json(), "test");
  auto ids = t.encode("he<|end|>he", false);
  EXPECT_EQ(pieces(t, ids), (std::vector<std::string>{"he", "<|end|>", "he"}));
  EXPECT_TRUE(t.is_special(1000));
  // Without parse_special the marker is plain text.
  ids = t.encode("<|end|>", false, false);
  EXPECT_EQ(ids.size(), 7u);
  // lstrip takes the spaces before <mask> into the token.
  EXPECT_EQ(pieces(t, t.encode("he   <mask>", false)), (std::vector<std::string>{"he", "<mask>"}));
  EXPECT_EQ(t.encode("he", true), (std::vector<int32_t>{1000, t.token_id("he")}));
  EXPECT_EQ(t.decode(t.encode("he<|end|>", true), true), "he");
}

TEST(Tokenizer, EmptyAndInvalidUtf8) {
  HfTokenizer t(byte_level_json(), "test");
  EXPECT_TRUE(t.encode("", false).empty());
  EXPECT_EQ(t.encode("", true), (std::vector<int32_t>{1000}));
  // Invalid bytes are read as U+FFFD, as Python's errors="replace" decoding does.
  EXPECT_EQ(t.encode("a\xFF\xC3", false), t.encode("a\xEF\xBF\xBD\xEF\xBF\xBD", false));
  EXPECT_EQ(utf8::sanitize("\xE2\x82"), "\xEF\xBF\xBD");
  EXPECT_EQ(utf8::sanitize("\xED\xA0\x80"), "\xEF\xBF\xBD\xEF\xBF\xBD\xEF\xBF\xBD");  // surrogate
  // A decode of a cut sequence is repaired, never invalid.
  EXPECT_EQ(t.decode({0xF0, 0x9F}, false), "\xEF\xBF\xBD");
}

TEST(Tokenizer, StreamDecoderHoldsSplitEmoji) {
  HfTokenizer t(byte_level_json(), "test");
  const std::string text = "a\xF0\x9F\x98\x80" "b";  // a😀b
  const auto ids = t.encode(text, false);
  ASSERT_EQ(ids.size(), 6u);
  StreamDecoder d(t);
  std::vector<std::string> outs;
  for (int32_t id : ids) outs.push_back(d.push(id));
  EXPECT_EQ(outs, (std::vector<std::string>{"a", "", "", "", "\xF0\x9F\x98\x80", "b"}));
  EXPECT_EQ(d.flush(), "");
  StreamDecoder cut(t);
  EXPECT_EQ(cut.push(0xF0), "");
  EXPECT_EQ(cut.push(0x9F), "");
  EXPECT_EQ(cut.flush(), "\xEF\xBF\xBD");
  StreamDecoder special(t, true);
  EXPECT_EQ(special.push(1000), "");
}

TEST(Tokenizer, SplitBehaviors) {
  auto run = [](const char* behavior, bool invert) {
    auto p = make_pre_tokenizer({{"type", "Split"}, {"pattern", {{"String", "-"}}}, {"behavior", behavior},
                                 {"invert", invert}});
    std::vector<Piece> v{{"a-b--c", true}};
    p->split(v);
    std::vector<std::string> out;
    for (auto& x : v) out.push_back(x.text);
    return out;
  };
  using V = std::vector<std::string>;
  EXPECT_EQ(run("Removed", false), (V{"a", "b", "c"}));
  EXPECT_EQ(run("Isolated", false), (V{"a", "-", "b", "-", "-", "c"}));
  EXPECT_EQ(run("MergedWithPrevious", false), (V{"a-", "b-", "-", "c"}));
  EXPECT_EQ(run("MergedWithNext", false), (V{"a", "-b", "-", "-c"}));
  EXPECT_EQ(run("Contiguous", false), (V{"a", "-", "b", "--", "c"}));
  EXPECT_EQ(run("Removed", true), (V{"-", "-", "-"}));
}

TEST(Tokenizer, LargeInputAndThreads) {
  HfTokenizer t(byte_level_json(), "test");
  std::mt19937 rng(7);
  std::string big;
  const char* alphabet = "hello wor\n\t ";
  for (int i = 0; i < (1 << 20); ++i) big += alphabet[rng() % 12];
  big += std::string(100000, 'l');  // one long word goes through the merge queue
  const auto t0 = std::chrono::steady_clock::now();
  const auto ids = t.encode(big, false);
  EXPECT_LT(std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count(), 20.0);
  EXPECT_EQ(t.decode(ids, false), big);
  const std::string small = big.substr(0, 20000);
  const auto want = t.encode(small, false);
  std::vector<std::thread> th;
  std::vector<int> ok(4, 0);
  for (int k = 0; k < 4; ++k) th.emplace_back([&, k] { ok[k] = t.encode(small, false) == want; });
  for (auto& x : th) x.join();
  EXPECT_EQ(ok, (std::vector<int>{1, 1, 1, 1}));
}

// Threads tokenizing distinct words at once (cache misses, shards filling and clearing) get the
// ids a fresh tokenizer gives each text alone.
TEST(Tokenizer, ConcurrentEncodesOfDistinctWordsMatchSerialOnes) {
  HfTokenizer shared(byte_level_json(), "test");
  std::vector<std::string> texts(4);
  std::vector<std::vector<int32_t>> want(texts.size());
  for (size_t k = 0; k < texts.size(); ++k) {
    std::mt19937 rng(static_cast<uint32_t>(11 + k));
    const char* alphabet = "helowrd";
    for (int w = 0; w < 40000; ++w) {
      const int len = 1 + static_cast<int>(rng() % 9);
      for (int i = 0; i < len; ++i) texts[k] += alphabet[rng() % 7];
      texts[k] += ' ';
    }
    want[k] = HfTokenizer(byte_level_json(), "test").encode(texts[k], false);
  }
  std::vector<std::thread> th;
  std::vector<int> ok(texts.size(), 0);
  for (size_t k = 0; k < texts.size(); ++k)
    th.emplace_back([&, k] { ok[k] = shared.encode(texts[k], false) == want[k]; });
  for (auto& x : th) x.join();
  EXPECT_EQ(ok, (std::vector<int>{1, 1, 1, 1}));
}

TEST(Tokenizer, VocabularyPastTheEmbeddingIsWarnedAbout) {
  HfTokenizer t(byte_level_json(), "test");
  const int32_t n = t.vocab_size();
  EXPECT_EQ(vocab_fit_warning(t, n), "");
  EXPECT_EQ(vocab_fit_warning(t, n + 100), "") << "a padded embedding is fine";
  const std::string w = vocab_fit_warning(t, n - 3);
  EXPECT_NE(w.find("the 3 ids from " + std::to_string(n - 3)), std::string::npos) << w;
  EXPECT_NE(w.find("(the first '<|end|>')"), std::string::npos) << w;
}

std::unique_ptr<SpmTokenizer> tiny_spm(std::vector<std::string> extra_bytes = {}) {
  std::vector<std::string> tok{"<unk>", "<s>", "</s>", "\xE2\x96\x81", "a", "b", "ab", "\xE2\x96\x81" "a", "ba"};
  std::vector<float> score{0, 0, 0, -1, -2, -2, -3, -1.5f, -0.5f};
  std::vector<int32_t> type{2, 3, 3, 1, 1, 1, 1, 1, 1};
  for (int b = 0; b < 256; ++b) {
    char name[8];
    std::snprintf(name, sizeof name, "<0x%02X>", b);
    tok.push_back(name), score.push_back(0), type.push_back(6);
  }
  for (auto& e : extra_bytes) tok.push_back(e), score.push_back(0), type.push_back(6);
  auto t = std::make_unique<SpmTokenizer>(tok, score, type, true, "test.gguf");
  t->bos_id = 1;
  t->add_bos = true;
  return t;
}

TEST(Tokenizer, SpmMergesByScoreAndFallsBackToBytes) {
  auto t = tiny_spm();
  // "▁aba": ba (-0.5) beats ▁a (-1.5) and ab (-3); merging ab first would give ▁a + ba too late.
  EXPECT_EQ(pieces(*t, t->encode("aba", false)), (std::vector<std::string>{"\xE2\x96\x81" "a", "ba"}));
  // "bab": ba (-0.5) and ab (-3): the higher score wins over the leftmost-first order.
  EXPECT_EQ(pieces(*t, t->encode("bab", false)), (std::vector<std::string>{"\xE2\x96\x81", "ba", "b"}));
  EXPECT_EQ(pieces(*t, t->encode("ab", true)), (std::vector<std::string>{"<s>", "\xE2\x96\x81" "a", "b"}));
  EXPECT_EQ(pieces(*t, t->encode("\xC3\xA9", false)),
            (std::vector<std::string>{"\xE2\x96\x81", "<0xC3>", "<0xA9>"}));
  EXPECT_EQ(t->decode(t->encode("ab a\xC3\xA9", true), true), "ab a\xC3\xA9");
  EXPECT_EQ(t->encode("", true), (std::vector<int32_t>{1}));
  EXPECT_EQ(t->encode("a</s>", false), (std::vector<int32_t>{7, 2}));
}

TEST(Tokenizer, TextsPastTheEncodeLimitAreRefused) {
  // Past the limit the merge loops' int symbol indices could wrap (a 2 GiB text from the CLI).
  std::string big(kMaxEncodeBytes + 1, 'a');
  HfTokenizer hf(byte_level_json(), "test");
  auto spm = tiny_spm();
  for (const Tokenizer* t : {static_cast<const Tokenizer*>(&hf), static_cast<const Tokenizer*>(spm.get())}) {
    try {
      t->encode(big, true);
      ADD_FAILURE() << "a text of " << big.size() << " bytes was encoded";
    } catch (const Error& e) {
      EXPECT_NE(std::string(e.what()).find("MiB one text may hold"), std::string::npos) << e.what();
    }
  }
  big.resize(1000);
  EXPECT_EQ(hf.decode(hf.encode(big, false), false), big);
}

TEST(Tokenizer, SpmRefusesMisspelledByteTokens) {
  EXPECT_THROW(tiny_spm({"<0x-1>"}), Error);
  EXPECT_THROW(tiny_spm({"<0xZZ>"}), Error);
  EXPECT_THROW(tiny_spm({"<0x1>"}), Error);
}

TEST(Tokenizer, LoadAppliesConfigs) {
  ModelFiles f;
  f.path = "model";
  f.tokenizer_json = byte_level_json();
  f.tokenizer_config = {{"bos_token", {{"content", "<|end|>"}}}, {"eos_token", "<mask>"},
                        {"chat_template", json::array({{{"name", "tool_use"}, {"template", "T"}},
                                                       {{"name", "default"}, {"template", "D"}}})}};
  f.generation_config = {{"eos_token_id", {1001, 5}}};
  auto t = load_tokenizer(f);
  EXPECT_EQ(t->bos_id, 1000);
  EXPECT_EQ(t->eos_id, 1001);
  EXPECT_EQ(t->eos_ids, (std::vector<int32_t>{1001, 5}));
  EXPECT_TRUE(t->add_bos);
  EXPECT_EQ(t->chat_template, "D");
  f.tokenizer_config = {{"eos_token", "<nope>"}};
  try {
    load_tokenizer(f);
    FAIL() << "an unknown eos_token must be refused";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("tokenizer_config.json"), std::string::npos);
    EXPECT_NE(std::string(e.what()).find("eos_token"), std::string::npos);
  }
}

TEST(Tokenizer, WrongJsonTypesNameTheFile) {
  // Found by fuzz/fuzz_tokenizer_json: a string where a flag belongs escaped as a bare json error.
  ModelFiles f;
  f.path = "model";
  f.tokenizer_json = byte_level_json();
  f.tokenizer_json["added_tokens"] = json::array({{{"id", 1000}, {"content", "<x>"}, {"special", "yes"}}});
  try {
    load_tokenizer(f);
    FAIL() << "a string 'special' must be refused";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("model/tokenizer.json"), std::string::npos) << e.what();
  }
  f.tokenizer_json = byte_level_json();
  f.tokenizer_config = {{"add_bos_token", "yes"}};
  try {
    load_tokenizer(f);
    FAIL() << "a string 'add_bos_token' must be refused";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("tokenizer_config.json"), std::string::npos) << e.what();
  }
}

TEST(Tokenizer, LlamaGgufWhenShared) {
  const std::string path = std::string(TF_SHARED_DIR) + "/models/llama-2-tiny-random.gguf";
  if (!std::filesystem::exists(path)) GTEST_SKIP() << "no " << path;
  auto t = load_tokenizer(open_tokenizer_files(path));
  EXPECT_EQ(t->encode("Hello world", true), (std::vector<int32_t>{1, 15043, 3186}));
  EXPECT_EQ(t->decode({1, 15043, 3186}, true), "Hello world");
}

}  // namespace
}  // namespace tf
