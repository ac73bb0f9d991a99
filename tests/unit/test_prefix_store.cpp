#include <gtest/gtest.h>

#include <numeric>

#include "backend/backend.h"
#include "engine/prefix_store.h"

namespace tf {

namespace {

std::vector<int32_t> seq(int n, int start) {
  std::vector<int32_t> v(static_cast<size_t>(n));
  std::iota(v.begin(), v.end(), start);
  return v;
}

// A lane's life: take pages for `tokens`, then finish and hand its full pages to the store.
std::vector<int32_t> run_lane(PagePool& pool, PrefixStore& store, const std::string& salt,
                              const std::vector<int32_t>& tokens, int page) {
  std::vector<int32_t> pages = store.match(salt, tokens, static_cast<int>(tokens.size()) / page);
  const int have = static_cast<int>(pages.size());
  const int need = (static_cast<int>(tokens.size()) + page - 1) / page - have;
  if (pool.free_count() < need) store.evict_until_free(need);
  EXPECT_TRUE(pool.alloc(need, pages));
  std::vector<int32_t> copy = pages;
  store.insert(salt, tokens, pages, static_cast<int>(tokens.size()) / page);
  pool.release(pages);
  store.trim();
  return copy;
}

}  // namespace

TEST(PrefixStore, MatchesTheLongestCachedRunOfFullPages) {
  PagePool pool(32, 4);
  PrefixStore store(pool, 4, 1);
  store.set_device_cap(32);
  auto a = seq(10, 100);  // two full pages + 2 tokens
  auto pages = run_lane(pool, store, "", a, 4);
  EXPECT_EQ(store.stats().entries, 2u);
  EXPECT_EQ(store.stats().kept_pages, 2u);
  auto b = a;
  b[5] = 7;  // differs inside the second page
  auto got = store.match("", b, 2);
  ASSERT_EQ(got.size(), 1u);
  EXPECT_EQ(got[0], pages[0]);
  EXPECT_EQ(pool.refcount(got[0]), 2);  // the store's and ours
  pool.release(got);
  got = store.match("", a, 2);
  EXPECT_EQ(got, std::vector<int32_t>(pages.begin(), pages.begin() + 2));
  pool.release(got);
  EXPECT_TRUE(store.check());
}

TEST(PrefixStore, SaltsNeverShareAPage) {
  PagePool pool(16, 4);
  PrefixStore store(pool, 4, 1);
  store.set_device_cap(16);
  auto t = seq(8, 0);
  run_lane(pool, store, "tenant-a", t, 4);
  EXPECT_TRUE(store.match("tenant-b", t, 2).empty());
  EXPECT_TRUE(store.match("", t, 2).empty());
  auto got = store.match("tenant-a", t, 2);
  EXPECT_EQ(got.size(), 2u);
  pool.release(got);
}

TEST(PrefixStore, ForcedHashCollisionsNeverReturnWrongPages) {
  PagePool pool(32, 4);
  PrefixStore store(pool, 4, 1);
  store.set_device_cap(32);
  store.set_hash_for_test([](uint64_t, const int32_t*, int) { return uint64_t{42}; });
  auto a = seq(8, 0), b = seq(8, 50);
  auto pa = run_lane(pool, store, "", a, 4);
  auto pb = run_lane(pool, store, "", b, 4);
  auto got = store.match("", b, 2);
  ASSERT_EQ(got.size(), 2u);
  EXPECT_EQ(got[0], pb[0]);
  EXPECT_EQ(got[1], pb[1]);
  pool.release(got);
  auto c = seq(8, 900);  // same hash, other tokens: no hit at all
  EXPECT_TRUE(store.match("", c, 2).empty());
  // Another tenant with colliding hashes still sees nothing.
  EXPECT_TRUE(store.match("x", a, 2).empty());
}

TEST(PrefixStore, EvictsLeastRecentlyUsedLeavesUnderPressureAndCap) {
  PagePool pool(8, 4);
  PrefixStore store(pool, 4, 1);
  store.set_device_cap(8);
  auto a = seq(8, 0), b = seq(8, 100), c = seq(8, 200);
  run_lane(pool, store, "", a, 4);
  run_lane(pool, store, "", b, 4);
  {
    auto touch = store.match("", a, 2);  // b is now the oldest
    pool.release(touch);
  }
  run_lane(pool, store, "", c, 4);  // 6 kept; fine
  std::vector<int32_t> big;
  ASSERT_EQ(pool.free_count(), 2);
  EXPECT_EQ(store.evict_until_free(4), 2);
  EXPECT_TRUE(store.match("", b, 2).empty() || store.match("", b, 1).size() < 2);
  auto ga = store.match("", a, 2);
  EXPECT_EQ(ga.size(), 2u);
  pool.release(ga);
  EXPECT_GE(store.stats().evictions, 2u);
  store.set_device_cap(2);
  run_lane(pool, store, "", seq(8, 300), 4);
  EXPECT_LE(store.stats().kept_pages, 2u);
  EXPECT_TRUE(store.check());
  EXPECT_EQ(pool.free_count() + static_cast<int>(store.stats().kept_pages), pool.total());
}

TEST(PrefixStore, PagesInUseAreNeverEvicted) {
  PagePool pool(4, 4);
  PrefixStore store(pool, 4, 1);
  store.set_device_cap(4);
  auto a = seq(8, 0);
  run_lane(pool, store, "", a, 4);
  auto held = store.match("", a, 2);  // a lane holds them
  ASSERT_EQ(held.size(), 2u);
  EXPECT_EQ(store.evict_until_free(4), 0);
  EXPECT_EQ(pool.free_count(), 2);
  pool.release(held);
  EXPECT_EQ(store.evict_until_free(4), 2);
}

TEST(PrefixStore, HostTierRestoresEvictedPages) {
  auto backend = make_cpu_backend(1);
  auto kv = backend->alloc_kv(2, 4, 4, 1, 2);
  PagePool pool(4, 4);
  PrefixStore store(pool, 4, 1, backend.get(), kv.get());
  store.set_device_cap(4);
  store.set_host_budget(1 << 20);
  auto a = seq(8, 0);
  auto pages = run_lane(pool, store, "", a, 4);
  // Mark the pages' contents so a restore can be checked.
  const uint64_t floats = Backend::kv_page_bytes(*kv) / sizeof(float);
  std::vector<float> mark(floats);
  for (size_t i = 0; i < 2; ++i) {
    std::iota(mark.begin(), mark.end(), static_cast<float>(1000 * (i + 1)));
    backend->kv_page_from_host(*kv, pages[i], mark.data());
  }
  EXPECT_EQ(store.evict_until_free(4), 2);
  EXPECT_EQ(store.stats().host_entries, 2u);
  EXPECT_GT(store.stats().host_bytes, 0u);
  // Scribble over the freed pages, then restore.
  std::vector<float> junk(floats, -1.0f);
  for (int p = 0; p < 4; ++p) backend->kv_page_from_host(*kv, p, junk.data());
  auto got = store.match("", a, 2);
  ASSERT_EQ(got.size(), 2u);
  for (size_t i = 0; i < 2; ++i) {
    std::vector<float> back(floats);
    backend->kv_page_to_host(*kv, got[i], back.data());
    EXPECT_EQ(back[0], static_cast<float>(1000 * (i + 1)));
    EXPECT_EQ(back[floats - 1], static_cast<float>(1000 * (i + 1) + floats - 1));
  }
  EXPECT_EQ(store.stats().restores, 2u);
  EXPECT_EQ(store.stats().host_bytes, 0u);
  pool.release(got);
  // A host budget below one page drops instead.
  store.set_host_budget(8);
  store.evict_until_free(4);
  EXPECT_EQ(store.stats().host_entries, 0u);
  EXPECT_TRUE(store.match("", a, 2).empty());
}

TEST(PrefixStore, StateSnapshotsCutTheMatchAndObeyTheirBudget) {
  PagePool pool(32, 4);
  PrefixStore store(pool, 4, 1);
  store.set_device_cap(32);
  store.set_state_budget(2 * 3 * sizeof(float));  // two snapshots of 3 floats
  auto t = seq(20, 0);
  run_lane(pool, store, "", t, 4);
  auto snap = [](float v) { return std::make_shared<const std::vector<float>>(3, v); };
  StateSnapshot got;
  auto pages = store.match_state("", t, 5, got);
  EXPECT_TRUE(pages.empty()) << "no snapshot: nothing to resume from";
  EXPECT_FALSE(got);
  store.attach_state("", t, 2, snap(2));
  store.attach_state("", t, 4, snap(4));
  pages = store.match_state("", t, 3, got);
  ASSERT_EQ(pages.size(), 2u) << "cut back to the deepest page with a state";
  ASSERT_TRUE(got);
  EXPECT_EQ((*got)[0], 2.0f);
  pool.release(pages);
  pages = store.match_state("", t, 5, got);
  ASSERT_EQ(pages.size(), 4u);
  EXPECT_EQ((*got)[0], 4.0f);
  pool.release(pages);
  // A third snapshot passes the budget: the least recently used goes.
  store.attach_state("", t, 1, snap(1));
  EXPECT_EQ(store.stats().states, 2u);
  pages = store.match_state("", t, 3, got);
  ASSERT_EQ(pages.size(), 1u) << "the snapshot at page 2 was the least recently used";
  pool.release(pages);
  // Another salt sees none of them; a state on a page that was never cached is ignored.
  EXPECT_TRUE(store.match_state("x", t, 5, got).empty());
  auto other = seq(8, 500);
  store.attach_state("", other, 2, snap(9));
  EXPECT_EQ(store.stats().states, 2u);
  EXPECT_TRUE(store.check());
  // Evicting a page drops the snapshots on it.
  store.evict_until_free(32);
  EXPECT_EQ(store.stats().states, 0u);
  EXPECT_EQ(store.stats().state_bytes, 0u);
  EXPECT_TRUE(store.check());
}

}  // namespace tf
