#include <gtest/gtest.h>

#include <algorithm>
#include <map>
#include <set>
#include <utility>
#include <vector>

#include "backend/cuda/attention_plan.h"

namespace tf::cuda::attn {

namespace {

struct Rows {
  std::vector<int32_t> pos, first, seq;
  void add(int s, int p0, int n, int window = 0) {
    for (int i = 0; i < n; ++i) {
      const int p = p0 + i;
      pos.push_back(p), seq.push_back(s), first.push_back(window > 0 ? std::max(0, p - window + 1) : 0);
    }
  }
};

// Llama-3.1-8B on an H200: 32 heads over 8, 4 heads a block, 16 rows a group.
PlanArgs llama(const Rows& r, bool flash = true, uint64_t cap = 256ull << 20,
               int flash_split = -1) {
  return {r.pos.data(),
          r.first.data(),
          r.seq.data(),
          static_cast<int>(r.pos.size()),
          16,
          4,
          8,
          132,
          flash,
          flash_split,
          32ull * 130 * 4,
          cap};
}

// Every property the kernels rely on, whatever the plan chose.
void check_plan(const PlanArgs& a, const Plan& pl) {
  ASSERT_EQ(pl.grp.front(), 0);
  ASSERT_EQ(pl.grp.back(), a.rows);
  const int ng = static_cast<int>(pl.grp.size()) - 1;
  for (int g = 0; g < ng; ++g) {
    const int r0 = pl.grp[g], r1 = pl.grp[g + 1];
    ASSERT_LT(r0, r1);
    ASSERT_LE(r1 - r0, a.rmax);
    for (int r = r0 + 1; r < r1; ++r) {
      ASSERT_EQ(a.seq[r], a.seq[r - 1]) << "a group spans sequences at row " << r;
      ASSERT_EQ(a.pos[r], a.pos[r - 1] + 1) << "a group's positions skip at row " << r;
    }
    // Groups are maximal: the next row could not have joined.
    if (r1 < a.rows && r1 - r0 < a.rmax) {
      ASSERT_TRUE(a.seq[r1] != a.seq[r1 - 1] || a.pos[r1] != a.pos[r1 - 1] + 1);
    }
  }
  // Each group appears once whole, or once per split it covers; flash items first.
  ASSERT_EQ(pl.items.size() % 2, 0u);
  std::map<int, std::set<int>> splits;
  std::set<int> whole;
  for (size_t i = 0; i < pl.items.size(); i += 2) {
    const int g = pl.items[i], s = pl.items[i + 1];
    ASSERT_GE(g, 0);
    ASSERT_LT(g, ng);
    const bool flash_item = i / 2 < pl.n_flash;
    if (flash_item) {
      ASSERT_TRUE(a.flash);
      if (s >= 0) {
        // Chunk s of the group's splits: the splits themselves must each be covered once.
        ASSERT_NE(a.flash_split, 0);
        ASSERT_GE(pl.chunk, 1);
        const int s_lo = a.first[pl.grp[g]] / kSplit, s_hi = a.pos[pl.grp[g + 1] - 1] / kSplit;
        ASSERT_LE(s_lo + s * pl.chunk, s_hi) << "an empty chunk";
        for (int k = s_lo + s * pl.chunk; k <= std::min(s_hi, s_lo + (s + 1) * pl.chunk - 1); ++k)
          ASSERT_TRUE(splits[g].insert(k).second) << "split " << k << " of group " << g << " twice";
        continue;
      }
      if ((pl.grp[g + 1] - pl.grp[g]) * a.hpb <= 16) {
        // Only the decode form takes a small group whole: one of few splits, or one whose splits a
        // chunk of its split mode covers.
        ASSERT_TRUE(a.decode) << "a small group went whole to the flash kernel";
        const int span = a.pos[pl.grp[g + 1] - 1] / kSplit - a.first[pl.grp[g]] / kSplit;
        const bool fits_chunk = a.whole_decode > 0 && a.whole_chunks && a.flash_split < 0 && span < pl.chunk;
        ASSERT_TRUE(span < a.whole_decode || fits_chunk)
            << "a small group of too many splits went whole to the decode form";
      }
    }
    // A small group of few splits always goes whole to the decode form.
    if (a.flash && a.decode && (pl.grp[g + 1] - pl.grp[g]) * a.hpb <= 16 &&
        a.pos[pl.grp[g + 1] - 1] / kSplit - a.first[pl.grp[g]] / kSplit < a.whole_decode) {
      ASSERT_TRUE(flash_item && s < 0) << "group " << g << " missed the decode form's whole mode";
    }
    if (s < 0) {
      ASSERT_TRUE(whole.insert(g).second) << "group " << g << " twice";
    } else {
      ASSERT_TRUE(splits[g].insert(s).second);
    }
  }
  for (const auto& [g, ss] : splits) {
    ASSERT_FALSE(whole.count(g)) << "group " << g << " both whole and split";
    const int r0 = pl.grp[g], r1 = pl.grp[g + 1];
    ASSERT_EQ(*ss.begin(), a.first[r0] / kSplit);
    ASSERT_EQ(*ss.rbegin(), a.pos[r1 - 1] / kSplit);
    ASSERT_EQ(static_cast<int>(ss.size()), *ss.rbegin() - *ss.begin() + 1);
  }
  ASSERT_EQ(whole.size() + splits.size(), static_cast<size_t>(ng));
  // Split-mode rows own disjoint partial slots, one per split they cover, within the cap.
  std::vector<int> owner(static_cast<size_t>(pl.slots), -1);
  std::set<int> brows(pl.brows.begin(), pl.brows.end());
  ASSERT_EQ(brows.size(), pl.brows.size());
  for (const auto& [g, ss] : splits)
    for (int r = pl.grp[g]; r < pl.grp[g + 1]; ++r) {
      ASSERT_TRUE(brows.count(r));
      for (int k = 0; k < row_splits(a.pos[r], a.first[r]); ++k) {
        const int slot = pl.part_off[r] + k;
        ASSERT_LT(slot, pl.slots);
        ASSERT_EQ(owner[slot], -1) << "slot " << slot << " shared";
        owner[slot] = r;
      }
    }
  ASSERT_LE(static_cast<uint64_t>(pl.slots) * a.slot_bytes, a.max_partial_bytes);
  for (int o : owner) ASSERT_GE(o, 0) << "an unused slot";
}

// The plan for a, checked.
Plan checked(const PlanArgs& a) {
  Plan pl = plan_attention(a);
  check_plan(a, pl);
  return pl;
}

}  // namespace

TEST(AttentionPlan, RowSplitsCountTheGridSplitsOfTheKeys) {
  EXPECT_EQ(row_splits(0, 0), 1);
  EXPECT_EQ(row_splits(63, 0), 1);
  EXPECT_EQ(row_splits(64, 0), 2);
  EXPECT_EQ(row_splits(64, 64), 1);
  EXPECT_EQ(row_splits(200, 63), 4);  // splits 0..3
}

TEST(AttentionPlan, LongPrefillGoesWholeToFlash) {
  Rows r;
  r.add(0, 0, 4096);
  const PlanArgs a = llama(r);
  const Plan pl = checked(a);
  EXPECT_EQ(pl.grp.size(), 257u);
  EXPECT_EQ(pl.n_flash, 256u);
  EXPECT_EQ(pl.slots, 0);
  // Without the flash kernel the same groups go whole to the tile kernel at full size.
  const PlanArgs b = llama(r, false);
  const Plan tile = checked(b);
  EXPECT_EQ(tile.n_flash, 0u);
  EXPECT_EQ(tile.most_rows, 16);
}

TEST(AttentionPlan, ShortPrefillStaysWholeOnFlashButSplitsOnTheTileKernel) {
  Rows r;
  r.add(0, 0, 512);  // 32 groups x 8 head blocks: fewer than two blocks an SM
  const Plan flash = checked(llama(r));
  EXPECT_EQ(flash.n_flash, 32u);
  const Plan tile = checked(llama(r, false));
  EXPECT_EQ(tile.n_flash, 0u);
  EXPECT_GT(tile.slots, 0);
}

TEST(AttentionPlan, ManyDecodeSplitsGoToFlashInChunks) {
  Rows r;
  for (int s = 0; s < 64; ++s) r.add(s, 700 + 37 * s, 1);
  // 64 rows of 11 to 48 splits, 8 head blocks each: 15,184 split blocks, 14 splits a flash block.
  const PlanArgs a = llama(r);
  const Plan pl = checked(a);
  EXPECT_EQ(pl.brows.size(), 64u);
  EXPECT_EQ(pl.chunk, 14);
  EXPECT_EQ(pl.items.size() / 2, pl.n_flash);
  // Whole groups (bf16 mode's decode form) only where every group fits a chunk of 16: not here.
  PlanArgs whole = a;
  whole.whole_groups = true;
  EXPECT_EQ(checked(whole).chunk, 14);
  // With the decode form's whole mode, the six rows of at most 14 splits (700..885) go whole; the
  // rest keep their chunks and partials.
  whole.whole_decode = 4;
  const Plan some = checked(whole);
  int whole_items = 0;
  for (unsigned i = 0; i < some.n_flash; ++i) whole_items += some.items[2 * i + 1] < 0;
  EXPECT_EQ(whole_items, 6);
  EXPECT_EQ(some.brows.size(), 58u);
  // Without flash splits the tile kernel takes every split, one a block.
  const PlanArgs b = llama(r, true, 256ull << 20, 0);
  const Plan tile = checked(b);
  EXPECT_EQ(tile.n_flash, 0u);
  EXPECT_EQ(tile.most_rows, 1);
  EXPECT_EQ(tile.slots, pl.slots);
  // Few split blocks (one decode row): the tile kernel, one split a block.
  Rows one_row;
  one_row.add(0, 700, 1);
  const Plan few = checked(llama(one_row));
  EXPECT_EQ(few.n_flash, 0u);
  EXPECT_EQ(few.items.size(), 2u * 11);
  // Forced (TF_CUDA_FLASH_SPLIT=3, for the contract): the flash kernel, three splits a block.
  PlanArgs forced = llama(one_row, true, 256ull << 20, 3);
  const Plan f3 = checked(forced);
  EXPECT_EQ(f3.chunk, 3);
  EXPECT_EQ(f3.n_flash, 4u);
  EXPECT_EQ(f3.items.size(), 2u * 4);
  // Forced chunks keep split mode even where one chunk would cover the group.
  forced.flash_split = 16;
  forced.whole_decode = 4;
  const Plan f16 = checked(forced);
  EXPECT_EQ(f16.items, (std::vector<int32_t>{0, 0}));
  EXPECT_EQ(f16.brows.size(), 1u);
  // A decode row inside its first split has one split: it runs whole on the tile kernel.
  Rows short_ctx;
  short_ctx.add(0, 40, 1);
  const Plan one = checked(llama(short_ctx));
  EXPECT_EQ(one.n_flash, 0u);
  EXPECT_EQ(one.items, (std::vector<int32_t>{0, -1}));
}

TEST(AttentionPlan, MixedRoundsSlidingWindowsAndTheCap) {
  Rows r;
  r.add(0, 0, 300, 90);   // a prefill chunk with a sliding window
  r.add(1, 1000, 1);      // decode rows
  r.add(2, 5, 1);
  r.add(0, 300, 5, 90);   // the same sequence again, continuing (a new group: not adjacent rows)
  r.add(3, 64, 20);       // a chunk starting on a split seam
  r.add(4, 84, 2);        // another sequence whose positions continue the row before
  r.add(3, 100, 3);       // positions that skip
  for (bool flash : {true, false}) {
    const PlanArgs a = llama(r, flash);
    check_plan(a, plan_attention(a));
  }
  // A cap of 20 slots: the long decode row (16 splits) no longer fits and runs whole.
  const PlanArgs capped = llama(r, true, 20 * 32ull * 130 * 4);
  const Plan pl = checked(capped);
  EXPECT_GT(pl.slots, 0);
  EXPECT_LE(pl.slots, 20);
}

TEST(AttentionPlan, WarpSpecializedBlocksPairAdjacentGroupsOfOneSequence) {
  Rows r;
  r.add(0, 0, 96);       // 6 groups of 16 rows
  r.add(0, 200, 16);     // the same sequence, rows adjacent but positions not: never paired with them
  r.add(1, 0, 40);       // another sequence: 3 groups
  Plan pl = checked(llama(r));
  const unsigned n_flash = pl.n_flash;
  const unsigned dec = decode_first(pl, 4);
  std::vector<int32_t> flash_items(pl.items.begin() + 2 * dec, pl.items.begin() + 2 * n_flash);
  const std::vector<int32_t> tail(pl.items.begin() + 2 * n_flash, pl.items.end());
  const unsigned blocks = pair_flash_items(pl, dec, r.pos.data(), r.seq.data());
  ASSERT_GT(blocks, 0u);
  EXPECT_LT(blocks, n_flash - dec);
  // Every flash item lands in exactly one block, once; pairs share a sequence and touch.
  std::multiset<int32_t> seen;
  for (unsigned b = 0; b < blocks; ++b) {
    const int32_t ga = pl.items[2 * (dec + b)], gb = pl.items[2 * (dec + b) + 1];
    seen.insert(ga);
    if (gb < 0) continue;
    seen.insert(gb);
    const int32_t ra = pl.grp[ga], rb = pl.grp[gb];
    EXPECT_EQ(r.seq[ra], r.seq[rb]);
    // One group's rows end where the other's begin, and the positions carry on across the seam.
    const bool b_then_a = pl.grp[gb + 1] == ra && r.pos[ra] == r.pos[ra - 1] + 1;
    const bool a_then_b = pl.grp[ga + 1] == rb && r.pos[rb] == r.pos[rb - 1] + 1;
    EXPECT_TRUE(b_then_a || a_then_b) << "groups " << ga << " and " << gb;
  }
  std::multiset<int32_t> want;
  for (size_t i = 0; i < flash_items.size(); i += 2) want.insert(flash_items[i]);
  EXPECT_EQ(seen, want);
  // The tile kernel's items after the flash ones are untouched.
  EXPECT_TRUE(std::equal(tail.begin(), tail.end(), pl.items.begin() + 2 * n_flash));
  // A split-mode flash item anywhere in the range: no pairing, items unchanged.
  Plan sp = checked(llama(r));
  const unsigned sdec = decode_first(sp, 4);
  sp.items[2 * (sp.n_flash - 1) + 1] = 0;
  const std::vector<int32_t> items = sp.items;
  EXPECT_EQ(pair_flash_items(sp, sdec, r.pos.data(), r.seq.data()), 0u);
  EXPECT_EQ(sp.items, items);
}

TEST(AttentionPlan, WarpSpecializedFormTakesManyGroupsOfLongSequences) {
  // Whether the form takes these rows' flash groups, after decode_first as in the backend.
  const auto worth = [](const Rows& r, int mode) {
    Plan pl = checked(llama(r));
    const unsigned dec = decode_first(pl, 4);
    return flash_ws_worth(pl, dec, r.pos.data(), r.first.data(), 8, 132, mode);
  };
  Rows p4096, p2048, p1024, eight512, window, late;
  p4096.add(0, 0, 4096);
  p2048.add(0, 0, 2048);
  p1024.add(0, 0, 1024);
  for (int s = 0; s < 8; ++s) eight512.add(s, 0, 512);
  window.add(0, 0, 4096, 512);
  late.add(0, 3072, 1024);  // a chunk of 1,024 rows after 3,072 cached keys: many keys, few blocks
  EXPECT_TRUE(worth(p4096, -1));
  EXPECT_TRUE(worth(p2048, -1));
  EXPECT_FALSE(worth(p1024, -1)) << "256 blocks are under three waves of 132";
  EXPECT_FALSE(worth(eight512, -1)) << "many blocks, but short sequences";
  EXPECT_FALSE(worth(window, -1)) << "a window of 512 keys";
  EXPECT_FALSE(worth(late, -1));
  // Forced either way.
  EXPECT_FALSE(worth(p4096, 0));
  EXPECT_TRUE(worth(p1024, 1));
  EXPECT_TRUE(worth(eight512, 1));
  // The rule's edges: 1,024 keys a group on average against 1,023, and 400 blocks against 392.
  Rows edge;
  edge.add(0, 1024 - 8 - 1584 / 2, 1584);  // 99 groups of 16: 50 blocks x 8 = 400 >= 396
  EXPECT_TRUE(worth(edge, -1));
  Rows fewer_keys, fewer_blocks;
  fewer_keys.add(0, 1024 - 8 - 1584 / 2 - 1, 1584);  // 1,023 keys a group on average
  fewer_blocks.add(0, 4096, 1552);                    // 97 groups: 49 blocks x 8 = 392
  EXPECT_FALSE(worth(fewer_keys, -1));
  EXPECT_FALSE(worth(fewer_blocks, -1));
}

TEST(AttentionPlan, GroupsFollowTheHeadsABlockTakes) {
  Rows r;
  r.add(0, 0, 100);
  // MHA (one head a block): 64 rows a group; a GQA group of 8: 8 rows.
  for (auto [hpb, rmax] : {std::pair{1, 64}, std::pair{8, 8}}) {
    PlanArgs a = llama(r);
    a.hpb = hpb, a.rmax = rmax, a.yblocks = 32 / hpb;
    const Plan pl = checked(a);
    EXPECT_EQ(pl.grp[1], rmax);
  }
}

TEST(AttentionPlan, DecodeSplitsTakeTheFlashKernelAboveFourBlocksAnSM) {
  // 8 rows at 769: 13 splits x 8 head blocks x 8 = 832 split blocks, above 4 x 132: one split a block.
  Rows eight;
  for (int s = 0; s < 8; ++s) eight.add(s, 769, 1);
  const Plan pl = checked(llama(eight));
  EXPECT_EQ(pl.n_flash, 8u * 13);
  EXPECT_EQ(pl.chunk, 1);
  // Whole groups: 8 x 8 group blocks do not fill 132 SMs twice, so still one split a block.
  PlanArgs whole = llama(eight);
  whole.whole_groups = true;
  EXPECT_EQ(checked(whole).chunk, 1);
  // 64 rows at 513 (9 splits): 512 group blocks fill them, so a block takes a row's 9 splits.
  Rows lanes;
  for (int s = 0; s < 64; ++s) lanes.add(s, 513 + s % 3, 1);
  PlanArgs wide = llama(lanes);
  EXPECT_EQ(checked(wide).chunk, 4);
  wide.whole_groups = true;
  const Plan rows9 = checked(wide);
  EXPECT_EQ(rows9.chunk, 9);
  EXPECT_EQ(rows9.n_flash, 64u);
  EXPECT_EQ(rows9.brows.size(), 64u);
  // With the decode form's whole mode (bf16 mode) those blocks fold their 9 splits themselves.
  wide.whole_decode = 4;
  const Plan folded = checked(wide);
  EXPECT_EQ(folded.n_flash, 64u);
  EXPECT_EQ(folded.slots, 0);
  EXPECT_TRUE(folded.brows.empty());
  for (unsigned i = 0; i < folded.n_flash; ++i) EXPECT_EQ(folded.items[2 * i + 1], -1);
  // TF_CUDA_ATTN_FOLD=0: the partials and the merge, as before.
  wide.whole_chunks = false;
  EXPECT_EQ(checked(wide).brows.size(), 64u);
  // 1 row at 2,049: 33 x 8 = 264 split blocks, below: the tile kernel.
  Rows one;
  one.add(0, 2049, 1);
  const Plan tile = checked(llama(one));
  EXPECT_EQ(tile.n_flash, 0u);
  EXPECT_EQ(tile.items.size(), 2u * 33);
  // 2 rows at 2,049: 528 split blocks, exactly four an SM: still the tile kernel.
  one.add(1, 2049, 1);
  const Plan two = checked(llama(one));
  EXPECT_EQ(two.n_flash, 0u);
  // Without the decode form (TF_CUDA_FLASH_DECODE=0) the one-warp form starts at eight an SM.
  PlanArgs old = llama(eight);
  old.decode = false;
  EXPECT_EQ(checked(old).n_flash, 0u);
}

TEST(AttentionPlan, DecodeSplitsGoFirstToTheDecodeKernel) {
  Rows r;
  r.add(0, 0, 200);  // a prefill chunk: whole on the flash kernel
  for (int s = 1; s <= 6; ++s) r.add(s, 300 + 50 * s, 1);  // decode rows: split mode
  r.add(7, 400, 16);  // 64 pairs of one sequence: whole on the flash kernel
  const PlanArgs a = llama(r, true, 256ull << 20, 2);
  Plan pl = checked(a);
  const std::vector<int32_t> before = pl.items;
  const unsigned n_dec = decode_first(pl, a.hpb);
  check_plan(a, pl);
  // The flash items are the same pairs, reordered; the tile kernel's stay where they were.
  std::vector<std::pair<int32_t, int32_t>> x, y;
  for (unsigned i = 0; i < pl.n_flash; ++i) {
    x.emplace_back(before[2 * i], before[2 * i + 1]);
    y.emplace_back(pl.items[2 * i], pl.items[2 * i + 1]);
  }
  std::sort(x.begin(), x.end());
  std::sort(y.begin(), y.end());
  EXPECT_EQ(x, y);
  EXPECT_TRUE(std::equal(before.begin() + 2 * pl.n_flash, before.end(), pl.items.begin() + 2 * pl.n_flash));
  // Every decode item first (a split of a group of at most 16 pairs), none after.
  unsigned expect = 0;
  for (unsigned i = 0; i < pl.n_flash; ++i) {
    const int32_t g = pl.items[2 * i], c = pl.items[2 * i + 1];
    const bool small = (pl.grp[g + 1] - pl.grp[g]) * a.hpb <= 16;
    EXPECT_EQ(small, i < n_dec) << "item " << i;
    if (small) {
      EXPECT_GE(c, 0) << "item " << i << ": a whole small group with the decode form's whole mode off";
    }
    expect += small;
  }
  EXPECT_EQ(n_dec, expect);
  EXPECT_GT(n_dec, 0u);
  EXPECT_LT(n_dec, pl.n_flash);
}

TEST(AttentionPlan, SmallGroupsOfFewSplitsGoWholeToTheDecodeForm) {
  // One decode row at 70 (splits 0 and 1): whole on the decode form, no partials, no merge.
  Rows one;
  one.add(0, 70, 1);
  PlanArgs a = llama(one);
  a.whole_decode = 4;
  Plan pl = checked(a);
  EXPECT_EQ(pl.items, (std::vector<int32_t>{0, -1}));
  EXPECT_EQ(pl.n_flash, 1u);
  EXPECT_EQ(pl.slots, 0);
  EXPECT_TRUE(pl.brows.empty());
  EXPECT_EQ(decode_first(pl, a.hpb), 1u);
  // Off (f32 mode, or TF_CUDA_ATTN_WHOLE=0): split mode on the tile kernel, as before.
  a.whole_decode = 0;
  const Plan off = checked(a);
  EXPECT_EQ(off.n_flash, 0u);
  EXPECT_EQ(off.brows.size(), 1u);
  // The limit counts splits: 255 is four (0..3), 256 five.
  Rows at255, at256;
  at255.add(0, 255, 1);
  at256.add(0, 256, 1);
  PlanArgs b = llama(at255);
  b.whole_decode = 4;
  EXPECT_EQ(checked(b).n_flash, 1u);
  PlanArgs c = llama(at256);
  c.whole_decode = 4;
  EXPECT_EQ(checked(c).n_flash, 0u);
  // A sliding window counts the splits it sees: keys 257..320 are two.
  Rows win;
  win.add(0, 320, 1, 64);
  PlanArgs w = llama(win);
  w.whole_decode = 2;
  EXPECT_EQ(checked(w).n_flash, 1u);
  // Without the decode form the group stays with the tile kernel.
  a.whole_decode = 4;
  a.decode = false;
  EXPECT_EQ(checked(a).n_flash, 0u);
  // Four rows of one sequence are 16 pairs: whole; five are a group of 20: not the decode form.
  Rows four, five;
  four.add(0, 60, 4);
  five.add(0, 60, 5);
  PlanArgs f4 = llama(four), f5 = llama(five);
  f4.whole_decode = f5.whole_decode = 4;
  Plan p4 = checked(f4), p5 = checked(f5);
  EXPECT_EQ(p4.items, (std::vector<int32_t>{0, -1}));
  EXPECT_EQ(decode_first(p4, f4.hpb), 1u);
  EXPECT_EQ(decode_first(p5, f5.hpb), 0u);
  // A mixed round: the decode rows go whole and first, the prefill chunk whole to the flash kernel.
  Rows mixed;
  mixed.add(0, 0, 200);
  for (int s = 1; s <= 6; ++s) mixed.add(s, 10 + 40 * s, 1);
  PlanArgs m = llama(mixed);
  m.whole_decode = 4;
  Plan pm = checked(m);
  const unsigned n_dec = decode_first(pm, m.hpb);
  check_plan(m, pm);
  EXPECT_EQ(n_dec, 6u);
  for (unsigned i = 0; i < n_dec; ++i) EXPECT_EQ(pm.items[2 * i + 1], -1);
}

// The four-warp decode form takes launches past one wave of the eight-warp form (two blocks an
// SM), unless forced either way or its int32 pool rows would not hold the pool.
TEST(AttentionPlan, DecodeNarrowPastOneWaveOfTheWideForm) {
  EXPECT_FALSE(decode_narrow(264, 132, -1, 1 << 20));
  EXPECT_TRUE(decode_narrow(265, 132, -1, 1 << 20));
  EXPECT_TRUE(decode_narrow(512, 132, -1, 1 << 20));
  EXPECT_FALSE(decode_narrow(512, 132, 0, 1 << 20));
  EXPECT_TRUE(decode_narrow(8, 132, 1, 1 << 20));
  EXPECT_FALSE(decode_narrow(512, 132, 1, int64_t{INT32_MAX} + 1));
  EXPECT_TRUE(decode_narrow(512, 132, -1, INT32_MAX));
}

// The wide flash form's plan (head dims past 128, Qwen3-Next's 16 heads over 2: 8 heads a block,
// 8 rows a group): whole groups of more than 16 pairs only; decode rows, and groups of few
// pairs, stay on the tile kernel in groups of at most 16 pairs.
TEST(AttentionPlan, TheWideFormTakesOnlyWholeGroupsOfManyPairs) {
  Rows r;
  r.add(0, 0, 2048);
  for (int s = 1; s <= 40; ++s) r.add(s, 3000 + 7 * s, 1);  // decode rows
  r.add(41, 500, 2);                                         // a two-row verify group
  const PlanArgs a{r.pos.data(), r.first.data(), r.seq.data(), static_cast<int>(r.pos.size()),
                   8, 8, 2, 132, true, 0, 16ull * 258 * 4, 256ull << 20, false, true, 0, true};
  const Plan pl = checked(a);
  EXPECT_EQ(pl.n_flash, 256u);
  for (unsigned i = 0; i < pl.n_flash; ++i) {
    const int g = pl.items[2 * i];
    EXPECT_EQ(pl.items[2 * i + 1], -1);
    EXPECT_GT((pl.grp[g + 1] - pl.grp[g]) * a.hpb, 16);
  }
  EXPECT_LE(pl.most_rows * a.hpb, 16);
  EXPECT_GT(pl.slots, 0);  // the decode rows' splits
}

}  // namespace tf::cuda::attn
