#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <limits>
#include <map>
#include <numeric>
#include <set>
#include <random>

#include "backend/sampling.h"
#include "base/argmax.h"
#include "base/error.h"
#include "base/philox.h"
#include "engine/engine.h"
#include "engine/page_pool.h"
#include "engine/sampler.h"
#include "engine/scheduler.h"

namespace tf {

TEST(Scheduler, ChunksEndOnTheGridOrThePromptEnd) {
  EXPECT_EQ(chunk_end(0, 1000, 256), 256);
  EXPECT_EQ(chunk_end(256, 1000, 256), 512);
  EXPECT_EQ(chunk_end(768, 1000, 256), 1000);
  EXPECT_EQ(chunk_end(100, 1000, 256), 256);  // a resumed prompt realigns to the grid
  EXPECT_EQ(chunk_end(0, 5, 256), 5);
}

TEST(Scheduler, ChunksAlsoEndAtTheFirstMarkPastTheirStart) {
  const std::vector<int> marks = {700, 90, 300, 90, 10};  // any order, duplicates allowed
  std::vector<int> ends;
  for (int pos = 0; pos < 800;) ends.push_back(pos = chunk_end(pos, 800, 256, marks));
  EXPECT_EQ(ends, (std::vector<int>{10, 90, 256, 300, 512, 700, 768, 800}));
  EXPECT_EQ(chunk_end(90, 800, 256, marks), 256);  // a mark at the start does not cut
  EXPECT_EQ(chunk_end(0, 50, 256, {60, 40}), 40);
  EXPECT_EQ(chunk_end(0, 50, 256, {60}), 50);
}

TEST(Scheduler, ChunkWidthsDoNotDependOnLoad) {
  // The same prompt's chunk seams alone and beside busy lanes.
  auto seams = [](int other_lanes) {
    std::vector<LaneStatus> lanes;
    for (int i = 0; i < other_lanes; ++i) lanes.push_back({i + 1, 10, 5, 11, {}});  // decoding
    lanes.push_back({0, 0, 700, 700, {}});
    std::vector<int> ends;
    while (lanes.back().computed < 700) {
      RoundPlan plan = plan_round(lanes, other_lanes + 256, 256);
      for (const auto& it : plan.items)
        if (it.lane == 0) {
          ends.push_back(it.end);
          lanes.back().computed = it.end;
        }
    }
    return ends;
  };
  std::vector<int> expect = {256, 512, 700};
  EXPECT_EQ(seams(0), expect);
  EXPECT_EQ(seams(3), expect);
  EXPECT_EQ(seams(63), expect);
}

TEST(Scheduler, DecodeRowsFirstAndWholeChunksOnly) {
  std::vector<LaneStatus> lanes = {{0, 0, 300, 300, {}}, {1, 0, 300, 300, {}}, {2, 20, 10, 21, {}}};
  RoundPlan plan = plan_round(lanes, 1 + 256, 256);
  ASSERT_EQ(plan.items.size(), 2u);
  EXPECT_TRUE(plan.items[0].decode);
  EXPECT_EQ(plan.items[0].lane, 2);
  EXPECT_EQ(plan.items[1].lane, 0);
  EXPECT_EQ(plan.items[1].end - plan.items[1].begin, 256);
  EXPECT_EQ(plan.rows(), 257);
}

TEST(Scheduler, RoundBudgetHoldsSeveralPromptsWholeAndBoundsTheRows) {
  EXPECT_EQ(max_round_rows(64, 512, 8192, 0), 64 + 512);      // no budget: one chunk
  EXPECT_EQ(max_round_rows(64, 512, 8192, 4096), 64 + 4096);
  EXPECT_EQ(max_round_rows(4, 512, 8192, 4096), 4 + 4 * 512);  // no more than a chunk a lane
  EXPECT_EQ(max_round_rows(1, 512, 100, 4096), 1 + 100);       // a chunk no longer than the context
  EXPECT_EQ(max_round_rows(2, 512, 0, 700), 2 + 700);          // context 0: unbounded
  EXPECT_EQ(default_round_tokens(false, 128), 128);
  EXPECT_EQ(default_round_tokens(true, 512), 4096);
  EXPECT_EQ(default_round_tokens(true, 8192), 8192);
  // A burst of 64 prompts of 600 tokens: with 4,096 tokens a round eight first chunks start
  // together, each round within the bound and every chunk cut where the grid alone cuts it.
  auto prefill_rounds = [](int round_tokens) {
    std::vector<LaneStatus> lanes;
    for (int i = 0; i < 64; ++i) lanes.push_back({i, 0, 600, 600, {}});
    const int max_rows = max_round_rows(64, 512, 8192, round_tokens);
    std::vector<int> prefills;
    while (std::any_of(lanes.begin(), lanes.end(), [](const LaneStatus& l) { return l.computed < l.prompt_len; })) {
      RoundPlan plan = plan_round(lanes, max_rows, 512);
      EXPECT_LE(plan.rows(), max_rows);
      int n = 0;
      for (const auto& it : plan.items) {
        LaneStatus& l = lanes[static_cast<size_t>(it.lane)];
        EXPECT_EQ(it.begin, l.computed);
        if (it.decode) {
          ++l.length;
        } else {
          EXPECT_EQ(it.end, chunk_end(it.begin, l.prompt_len, 512)) << "lane " << it.lane;
          ++n;
        }
        l.computed = it.end;
        if (it.end == l.prompt_len) l.length = l.prompt_len + 1;
      }
      prefills.push_back(n);
    }
    return prefills;
  };
  const std::vector<int> wide = prefill_rounds(4096);
  EXPECT_EQ(wide, (std::vector<int>{8, 14, 13, 13, 13, 13, 13, 13, 13, 11, 4}));
  EXPECT_EQ(prefill_rounds(0).size(), 128u);  // one chunk a round
}

TEST(PagePool, CensusHoldsThroughAllocRefRelease) {
  PagePool pool(10, 16);
  std::vector<int32_t> a, b;
  ASSERT_TRUE(pool.alloc(4, a));
  ASSERT_TRUE(pool.alloc(6, b));
  EXPECT_FALSE(pool.alloc(1, a));
  EXPECT_EQ(a.size(), 4u);
  EXPECT_EQ(pool.free_count(), 0);
  pool.ref(a[0]);
  pool.release(a);
  EXPECT_EQ(pool.free_count(), 3);
  EXPECT_TRUE(pool.census_ok());
  pool.release(b);
  EXPECT_EQ(pool.free_count(), 9);
  EXPECT_EQ(pool.used_count() + pool.free_count(), pool.total());
  EXPECT_THROW(pool.unref(b.empty() ? 5 : b[0]), Error);
}

TEST(Sampler, PhiloxMatchesTheRandom123KnownAnswers) {
  struct Kat {
    uint32_t ctr[4], key[2], out[4];
  };
  const Kat kats[] = {
      {{0, 0, 0, 0}, {0, 0}, {0x6627e8d5, 0xe169c58d, 0xbc57ac4c, 0x9b00dbd8}},
      {{0xffffffff, 0xffffffff, 0xffffffff, 0xffffffff}, {0xffffffff, 0xffffffff},
       {0x408f276d, 0x41c83b0e, 0xa20bc7c6, 0x6d5451fd}},
      {{0x243f6a88, 0x85a308d3, 0x13198a2e, 0x03707344}, {0xa4093822, 0x299f31d0},
       {0xd16cfe09, 0x94fdcceb, 0x5001e420, 0x24126ea1}},
  };
  for (const auto& k : kats) {
    uint32_t out[4];
    philox4x32(k.ctr, k.key, out);
    for (int i = 0; i < 4; ++i) EXPECT_EQ(out[i], k.out[i]);
  }
}

namespace {

// A draw as the engine plans it (the spec and its penalty tokens), made by the cpu reference.
int32_t draw(const std::vector<float>& logits, const SamplingParams& p, const std::vector<int32_t>& history,
             size_t n_prompt, uint64_t position) {
  PenaltyHistory counted;
  std::vector<PenaltyToken> pens;
  const int32_t vocab = static_cast<int32_t>(logits.size());
  const SampleSpec s = Sampler::spec(p, 0, position, history, n_prompt, vocab, counted, pens);
  return sample_row(logits.data(), vocab, s, pens.data());
}

}  // namespace

TEST(Sampler, DrawDependsOnSeedAndPositionOnly) {
  std::vector<float> logits(50);
  for (int i = 0; i < 50; ++i) logits[static_cast<size_t>(i)] = static_cast<float>((i * 37) % 11) * 0.3f;
  SamplingParams p;
  p.temperature = 1.0f;
  p.seed = 42;
  std::vector<int32_t> hist = {1, 2, 3};
  for (uint64_t pos = 3; pos < 40; ++pos) EXPECT_EQ(draw(logits, p, hist, 3, pos), draw(logits, p, hist, 3, pos));
  // Different positions give different draws somewhere.
  int differ = 0;
  for (uint64_t pos = 3; pos < 40; ++pos) differ += draw(logits, p, hist, 3, pos) != draw(logits, p, hist, 3, pos + 1);
  EXPECT_GT(differ, 0);
}

TEST(Sampler, FiltersKeepOnlyWhatTheyShould) {
  std::vector<float> logits = {0.0f, 5.0f, 4.9f, -3.0f, 4.8f};
  SamplingParams p;
  std::vector<int32_t> hist = {0};
  p.temperature = 0;
  EXPECT_EQ(draw(logits, p, hist, 1, 1), 1);
  p.temperature = 1.0f;
  p.top_k = 2;
  for (uint64_t pos = 0; pos < 200; ++pos) {
    p.seed = pos;
    int32_t t = draw(logits, p, hist, 1, pos);
    EXPECT_TRUE(t == 1 || t == 2) << t;
  }
  p.top_k = 0;
  p.min_p = 0.5f;  // drops 0 and 3 (probability far below half of the top)
  for (uint64_t pos = 0; pos < 200; ++pos) {
    int32_t t = draw(logits, p, hist, 1, pos);
    EXPECT_TRUE(t == 1 || t == 2 || t == 4) << t;
  }
  p.min_p = 0;
  p.top_p = 0.01f;  // only the single most likely token
  for (uint64_t pos = 0; pos < 50; ++pos) EXPECT_EQ(draw(logits, p, hist, 1, pos), 1);
}

TEST(Sampler, PenaltiesFollowTheirDefinitions) {
  std::vector<float> logits = {1.0f, 2.0f, 1.9f};
  SamplingParams p;
  p.temperature = 0;
  std::vector<int32_t> hist = {0, 1};  // prompt 0, generated 1
  p.repetition_penalty = 1.2f;         // 2.0 / 1.2 < 1.9
  EXPECT_EQ(draw(logits, p, hist, 1, 2), 2);
  p.repetition_penalty = 1.0f;
  p.presence_penalty = 0.2f;  // only generated tokens count
  EXPECT_EQ(draw(logits, p, hist, 1, 2), 2);
  p.presence_penalty = 0.0f;
  p.frequency_penalty = 0.05f;  // 2.0 - 0.05 > 1.9
  EXPECT_EQ(draw(logits, p, hist, 1, 2), 1);
}

namespace {

// The greedy rule written as the plain left-to-right scan it is defined by.
int32_t scan_argmax(const std::vector<float>& v) {
  int32_t best = 0;
  for (int32_t i = 1; i < static_cast<int32_t>(v.size()); ++i)
    if (v[static_cast<size_t>(i)] > v[static_cast<size_t>(best)]) best = i;
  return best;
}

// The ids a spec may draw, by sorting: the top_k by logit (ties kept), then the shortest prefix by
// weight whose sum reaches top_p, then weights of at least min_p; one more id past the prefix is
// allowed (share 0), where the canonical sum and the sorted sum round apart. Each id's share.
std::map<int32_t, double> allowed(const std::vector<float>& l, const SampleSpec& s) {
  const size_t n = l.size();
  std::vector<int32_t> ids(n);
  std::iota(ids.begin(), ids.end(), 0);
  std::sort(ids.begin(), ids.end(), [&](int32_t a, int32_t b) { return l[a] > l[b] || (l[a] == l[b] && a < b); });
  const float m = l[static_cast<size_t>(ids[0])], inv_t = 1.0f / s.temperature;
  size_t k = n;
  if (s.top_k > 0 && static_cast<size_t>(s.top_k) < n) {
    k = static_cast<size_t>(s.top_k);
    while (k < n && l[static_cast<size_t>(ids[k])] == l[static_cast<size_t>(ids[k - 1])]) ++k;
  }
  std::vector<double> e(k);
  double sum = 0;
  for (size_t i = 0; i < k; ++i) sum += e[i] = std::exp((l[static_cast<size_t>(ids[i])] - m) * inv_t);
  size_t keep = k;
  double cum = 0;
  for (size_t i = 0; i < k && s.top_p < 1.0f; ++i)
    if ((cum += e[i]) >= static_cast<double>(s.top_p) * sum) {
      keep = i + 1;
      break;
    }
  std::map<int32_t, double> out;
  double kept = 0;
  for (size_t i = 0; i < keep; ++i)
    if (e[i] >= static_cast<double>(s.min_p)) kept += e[i];
  for (size_t i = 0; i < std::min(k, keep + 1); ++i)
    if (e[i] >= static_cast<double>(s.min_p)) out[ids[i]] = i < keep ? e[i] / kept : 0.0;
  return out;
}

}  // namespace

TEST(Sampler, ArgmaxIsTheLeftToRightScan) {
  std::mt19937 rng(7);
  const float nan = std::nanf(""), inf = std::numeric_limits<float>::infinity();
  for (int len = 1; len <= 70; ++len)
    for (int trial = 0; trial < 20; ++trial) {
      std::vector<float> v(static_cast<size_t>(len));
      for (auto& x : v) x = static_cast<float>(static_cast<int>(rng() % 9) - 4);  // many ties
      const size_t at = rng() % v.size();
      switch (trial % 5) {
        case 1: v[at] = nan; break;
        case 2: v[0] = nan; break;
        case 3: std::fill(v.begin(), v.end(), -inf), v[at] = (trial & 8) ? -inf : 0.0f; break;
        case 4: std::fill(v.begin(), v.end(), -0.0f), v[at] = 0.0f; break;
        default: break;
      }
      ASSERT_EQ(argmax(v.data(), len), scan_argmax(v)) << "length " << len << " trial " << trial;
    }
}

TEST(Sampler, DrawsStayInTheirFiltersAndFollowTheWeights) {
  std::mt19937 rng(11);
  std::normal_distribution<float> d(0.0f, 2.0f);
  for (int trial = 0; trial < 12; ++trial) {
    std::vector<float> l(3000 + static_cast<size_t>(trial) * 37);
    for (auto& x : l) x = d(rng);
    l[static_cast<size_t>(trial * 7)] = 9.0f;  // one clear favourite, so its share is measurable
    SampleSpec s;
    s.temperature = trial % 3 == 0 ? 2.0f : 0.7f;
    s.top_p = std::vector<float>{1.0f, 0.5f, 0.9f, 0.99f}[static_cast<size_t>(trial % 4)];
    s.top_k = trial % 5 == 1 ? 20 : 0;
    s.min_p = trial % 6 == 2 ? 0.02f : 0.0f;
    s.seed = static_cast<uint64_t>(trial);
    const auto ok = allowed(l, s);
    const int draws = 3000;
    int top = 0;
    for (int pos = 0; pos < draws; ++pos) {
      s.position = static_cast<uint64_t>(pos);
      const int32_t id = sample_row(l.data(), static_cast<int32_t>(l.size()), s);
      ASSERT_TRUE(ok.count(id)) << "trial " << trial << " drew " << id << " outside its filters";
      top += id == trial * 7;
    }
    const double p = ok.at(trial * 7), sigma = std::sqrt(p * (1 - p) / draws);
    EXPECT_NEAR(top / static_cast<double>(draws), p, 5 * sigma + 1e-3) << "trial " << trial;
  }
}

TEST(Sampler, PenaltyHistoryCountsOnlyNewTokensAndEqualsAFreshCount) {
  std::mt19937 rng(17);
  PenaltyHistory grown;
  std::vector<int32_t> history;
  const size_t n_prompt = 40;
  for (int step = 0; step < 300; ++step) {
    // Prompt, then generated tokens a few at a time; some ids outside a vocabulary of 50.
    const int add = step == 0 ? static_cast<int>(n_prompt) : 1 + static_cast<int>(rng() % 3);
    for (int i = 0; i < add; ++i) history.push_back(static_cast<int32_t>(rng() % 53) - 1);
    const bool with_prompt = step < 150;  // a settings change starts the count over
    grown.update(history, n_prompt, 50, with_prompt);
    PenaltyHistory fresh;
    fresh.update(history, n_prompt, 50, with_prompt);
    ASSERT_EQ(grown.tokens().size(), fresh.tokens().size()) << "step " << step;
    for (size_t i = 0; i < fresh.tokens().size(); ++i) {
      ASSERT_EQ(grown.tokens()[i].id, fresh.tokens()[i].id) << "step " << step;
      ASSERT_EQ(grown.tokens()[i].generated, fresh.tokens()[i].generated) << "step " << step;
    }
  }
  // A history shorter than what was counted is another sequence: counted afresh.
  history.resize(n_prompt + 5);
  grown.update(history, n_prompt, 50, false);
  PenaltyHistory fresh;
  fresh.update(history, n_prompt, 50, false);
  EXPECT_EQ(grown.tokens().size(), fresh.tokens().size());
  int generated = 0;
  for (const PenaltyToken& t : grown.tokens()) generated += t.generated;
  EXPECT_LE(generated, 5);
}

TEST(Sampler, RuleExpIsCloseToExpAndExactAtZero) {
  EXPECT_EQ(sample_exp(0.0f), 1.0f);
  EXPECT_EQ(sample_exp(-std::numeric_limits<float>::infinity()), 0.0f);
  EXPECT_EQ(sample_exp(std::nanf("")), 0.0f);
  EXPECT_EQ(sample_exp(-200.0f), 0.0f);
  double worst = 0;
  for (float x = -87.0f; x <= 0.0f; x += 0.00137f) {
    const double want = std::exp(static_cast<double>(x));
    worst = std::max(worst, std::fabs(sample_exp(x) - want) / want);
  }
  EXPECT_LT(worst, 1e-6);
  // Below the normal range: one rounding, so within half a denormal step (plus the relative error).
  for (float x = -103.0f; x < -88.0f; x += 0.37f)
    EXPECT_NEAR(sample_exp(x), std::exp(static_cast<double>(x)), 1e-45 + 1e-6 * std::exp(static_cast<double>(x))) << x;
}

TEST(Sampler, BracketedNucleusSearchEqualsTheBitwiseSearch) {
  std::mt19937 rng(13);
  for (int trial = 0; trial < 40; ++trial) {
    // Flat, peaked and tied weights in [0, 1], the largest 1 as the rule makes them.
    std::vector<float> e(500 + static_cast<size_t>(trial) * 97);
    const float spread = trial % 3 == 0 ? 0.5f : trial % 3 == 1 ? 8.0f : 30.0f;
    std::normal_distribution<float> d(0.0f, spread);
    for (auto& v : e) v = std::exp(-std::fabs(d(rng)));
    for (size_t i = 0; i < e.size(); i += 7) e[i] = e[0];
    e[static_cast<size_t>(trial) % e.size()] = 1.0f;
    std::vector<double> unused;
    double total = 0;
    for (float v : e) total += v;
    for (double p : {0.01, 0.3, 0.5, 0.9, 0.95, 0.999, 1.0}) {
      const double target = p * total * (1 + 1e-12 * (trial % 2));
      ASSERT_EQ(nucleus_bits(e, target, true), nucleus_bits(e, target, false)) << "trial " << trial << " p " << p;
    }
  }
}

TEST(Sampler, ColdOrTopOneIsTheArgmaxAndARowOfNoFiniteLogitToo) {
  std::vector<float> l = {0.5f, 3.0f, -1.0f, 3.0f};
  SampleSpec s;
  EXPECT_EQ(sample_row(l.data(), 4, s), 1);  // temperature 0
  s.temperature = 1.0f;
  s.top_k = 1;
  EXPECT_EQ(sample_row(l.data(), 4, s), 1);
  s.top_k = 0;
  const float inf = std::numeric_limits<float>::infinity();
  std::vector<float> hot = {0.5f, inf, 2.0f}, cold = {-inf, -inf, -inf};
  EXPECT_EQ(sample_row(hot.data(), 3, s), 1);
  EXPECT_EQ(sample_row(cold.data(), 3, s), 0);
  // min_p above every weight leaves nothing: the argmax.
  s.min_p = 2.0f;
  EXPECT_EQ(sample_row(l.data(), 4, s), 1);
  s.min_p = 0.0f;
  // Extreme settings the rule meets from callers other than the server: a denormal or NaN
  // temperature is greedy, a tiny top_p keeps the largest logits only, a huge temperature draws
  // from every id, top_k past the vocabulary filters nothing.
  for (float t : {1e-45f, std::nanf("")}) {
    s.temperature = t;
    EXPECT_EQ(sample_row(l.data(), 4, s), 1) << t;
  }
  s.temperature = 1.0f;
  s.top_p = 1e-9f;
  for (uint64_t pos = 0; pos < 50; ++pos) {
    s.position = pos;
    const int32_t id = sample_row(l.data(), 4, s);
    EXPECT_TRUE(id == 1 || id == 3) << id;  // the tied largest logits both stay
  }
  s.top_p = 1.0f;
  s.temperature = 1e30f;
  s.top_k = 1000;
  std::set<int32_t> seen;
  for (uint64_t pos = 0; pos < 200; ++pos) {
    s.position = pos;
    seen.insert(sample_row(l.data(), 4, s));
  }
  EXPECT_EQ(seen.size(), 4u);
}

}  // namespace tf
