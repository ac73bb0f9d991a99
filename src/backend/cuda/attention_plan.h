#pragma once
// How the CUDA attention groups a call's rows and hands them to its launches
// (cuda_attention.cu): plain C++ so the CPU tests can check it. The bits never depend on the
// plan; only which kernel computes a row, and with how many others in its block, do.
#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <vector>

namespace tf::cuda::attn {

constexpr int kSplit = 64;       // keys per split, on the absolute position grid
constexpr int kChunk = 128;      // head dims staged per pass
constexpr int kFlashPairs = 64;  // (row, head) pairs a flash block holds: 16 for each of 4 warps

// The splits that hold any of the keys first..pos.
inline int row_splits(int32_t pos, int32_t first) { return pos / kSplit - first / kSplit + 1; }

struct PlanArgs {
  const int32_t* pos;    // per row
  const int32_t* first;  // per row: the first key it sees
  const int32_t* seq;    // per row
  int rows;
  int rmax;     // rows a group may hold
  int hpb;      // heads a block takes: a group's pairs are its rows times hpb
  int yblocks;  // blocks per group along the heads
  int sms;
  bool flash;       // the flash kernel takes this head dim
  int flash_split;  // split-mode groups too: 0 never, -1 when many, n > 0 always (n splits a block)
  uint64_t slot_bytes;         // bytes of one split's partials for one row
  uint64_t max_partial_bytes;  // cap on all partials
  bool decode = true;          // split blocks have the flash kernel's eight-warp decode form
  // When every split group fits one chunk of 16 and a block each fills the device twice over,
  // a block takes a whole group (bf16 mode's decode form streams its splits two ahead).
  bool whole_groups = false;
  // Groups of at most 16 pairs over at most this many splits go whole to the decode form, which
  // folds them with no partials or merge (bf16 mode's decode kernel); so do those whose splits fit
  // one chunk of the decode form's split mode (its block would walk them all anyway); 0: never.
  int whole_decode = 0;
  bool whole_chunks = true;  // the second case above (TF_CUDA_ATTN_FOLD=0 turns it off, for timing)
};

struct Plan {
  std::vector<int32_t> grp;       // [groups + 1] first row of each group
  // (group, split) pairs: the flash kernel's items first, (group, -1) for a whole group or
  // (group, c) for its splits c * chunk.. (at most chunk); then the tile kernel's, (group, -1)
  // for a whole group, then (group, s) for each split s.
  std::vector<int32_t> items;
  std::vector<int32_t> part_off;  // split-mode rows: first partial slot
  std::vector<int32_t> brows;     // split-mode rows, for the merge
  unsigned n_flash = 0;           // items for the flash kernel, at the front
  int chunk = 1;                  // splits a flash block of a split-mode group walks
  int most_rows = 1;              // rows of the largest group the tile kernel takes
  int64_t slots = 0;              // partial slots in all
};

// Groups: runs of consecutive positions of one sequence, up to rmax rows. Split mode (a block per
// split, then a merge) for groups of few rows, or when tile-kernel blocks would not fill the
// device, while the partials fit; groups of more than 16 pairs go whole to the flash kernel when
// it applies; groups of few pairs and splits, or of few pairs whose splits one chunk covers, go
// whole to the decode form (whole_decode); the rest go whole to the tile kernel.
inline Plan plan_attention(const PlanArgs& a) {
  Plan pl;
  const auto at = [](int r) { return static_cast<size_t>(r); };
  pl.grp.push_back(0);
  for (int r = 1; r < a.rows; ++r)
    if (a.seq[at(r)] != a.seq[at(r - 1)] || a.pos[at(r)] != a.pos[at(r - 1)] + 1 || r - pl.grp.back() >= a.rmax)
      pl.grp.push_back(r);
  pl.grp.push_back(a.rows);
  const int ng = static_cast<int>(pl.grp.size()) - 1;
  const bool few = static_cast<int64_t>(ng) * a.yblocks < 2 * static_cast<int64_t>(a.sms);
  // Split-mode blocks go to the flash kernel when there are more than four an SM for its decode
  // form (fewer run faster one a block on the tile kernel), eight for its one-warp form: it
  // streams a block's splits by cp.async, in chunks that leave about eight blocks an SM.
  int64_t split_blocks = 0, split_groups = 0;
  int most_splits = 0;
  for (int g = 0; g < ng; ++g) {
    const int s_lo = a.first[at(pl.grp[at(g)])] / kSplit,
              s_hi = a.pos[at(pl.grp[at(g) + 1] - 1)] / kSplit;
    if (s_hi > s_lo) {
      split_blocks += static_cast<int64_t>(s_hi - s_lo + 1) * a.yblocks;
      split_groups += a.yblocks;
      most_splits = std::max(most_splits, s_hi - s_lo + 1);
    }
  }
  const int64_t target = 8 * static_cast<int64_t>(a.sms);
  const bool flash_split =
      a.flash && (a.flash_split > 0 ||
                  (a.flash_split < 0 && (a.decode ? 2 * split_blocks > target : split_blocks >= target)));
  if (flash_split)
    pl.chunk = a.flash_split > 0
                   ? a.flash_split
                   : static_cast<int>(std::clamp<int64_t>(split_blocks / target, 1, 16));
  if (flash_split && a.flash_split < 0 && a.whole_groups && most_splits <= 16 && split_groups >= 2 * static_cast<int64_t>(a.sms))
    pl.chunk = std::max(pl.chunk, most_splits);
  pl.part_off.assign(at(a.rows), 0);
  std::vector<int32_t> whole, splits;
  for (int g = ng - 1; g >= 0; --g) {
    const int r0 = pl.grp[at(g)], r1 = pl.grp[at(g) + 1];
    const int s_lo = a.first[at(r0)] / kSplit, s_hi = a.pos[at(r1 - 1)] / kSplit;
    int64_t need = 0;
    for (int r = r0; r < r1; ++r) need += row_splits(a.pos[at(r)], a.first[at(r)]);
    // A block that would walk every split of a small group anyway folds them itself: no partials.
    const bool one_chunk = flash_split && a.flash_split < 0 && s_hi - s_lo < pl.chunk && a.whole_decode > 0 &&
                           a.whole_chunks;
    if (a.flash && a.decode && (r1 - r0) * a.hpb <= 16 && (s_hi - s_lo < a.whole_decode || one_chunk)) {
      pl.items.insert(pl.items.end(), {g, -1});
      continue;
    }
    const bool to_flash = a.flash && (r1 - r0) * a.hpb > 16;
    const bool split_mode = s_hi > s_lo && ((few && !to_flash) || (r1 - r0) * 4 <= a.rmax) &&
                            static_cast<uint64_t>(pl.slots + need) * a.slot_bytes <= a.max_partial_bytes;
    if (!split_mode && to_flash) {
      pl.items.insert(pl.items.end(), {g, -1});
      continue;
    }
    if (!split_mode || !flash_split) pl.most_rows = std::max(pl.most_rows, r1 - r0);
    if (!split_mode) {
      whole.insert(whole.end(), {g, -1});
      continue;
    }
    for (int r = r0; r < r1; ++r) {
      pl.part_off[at(r)] = static_cast<int32_t>(pl.slots);
      pl.slots += row_splits(a.pos[at(r)], a.first[at(r)]);
      pl.brows.push_back(r);
    }
    if (flash_split) {
      for (int c = 0; c * pl.chunk <= s_hi - s_lo; ++c) pl.items.insert(pl.items.end(), {g, c});
    } else {
      for (int s = s_lo; s <= s_hi; ++s) splits.insert(splits.end(), {g, s});
    }
  }
  pl.n_flash = static_cast<unsigned>(pl.items.size() / 2);
  pl.items.insert(pl.items.end(), whole.begin(), whole.end());
  pl.items.insert(pl.items.end(), splits.begin(), splits.end());
  return pl;
}

// Whether bf16 mode's decode launch of `blocks` blocks takes the four-warp form, four blocks an
// SM: where the eight-warp form, two an SM, would need more than one wave. Its pool rows are int32.
// mode: -1 that rule, 0 never, 1 always (the contract's forced form).
inline bool decode_narrow(int64_t blocks, int sms, int mode, int64_t pool_rows) {
  if (pool_rows > INT32_MAX || mode == 0) return false;
  return mode > 0 || blocks > 2 * static_cast<int64_t>(sms);
}

// Moves the flash items of groups of at most 16 pairs (decode rows: their splits, or the whole
// group) to the front of the flash items, for the kernel that spreads one m tile over eight
// warps; returns how many.
inline unsigned decode_first(Plan& pl, int hpb) {
  std::vector<int32_t> dec, rest;
  for (unsigned i = 0; i < pl.n_flash; ++i) {
    const int32_t g = pl.items[2 * i], c = pl.items[2 * i + 1];
    const bool small = (pl.grp[static_cast<size_t>(g) + 1] - pl.grp[static_cast<size_t>(g)]) * hpb <= 16;
    std::vector<int32_t>& to = small ? dec : rest;
    to.insert(to.end(), {g, c});
  }
  std::copy(dec.begin(), dec.end(), pl.items.begin());
  std::copy(rest.begin(), rest.end(), pl.items.begin() + static_cast<std::ptrdiff_t>(dec.size()));
  return static_cast<unsigned>(dec.size() / 2);
}

// Whether the whole flash groups from `from` take the warp-specialized form: where their blocks
// (two groups each, times yblocks) fill three waves of `sms` and the last rows of the groups see
// 1,024 keys or more on average; shorter or fewer groups keep the one-block-a-group forms, which
// were as fast there. mode: -1 that rule, 0 never, 1 always (the contract's forced form).
inline bool flash_ws_worth(const Plan& pl, unsigned from, const int32_t* pos, const int32_t* first,
                           int yblocks, int sms, int mode) {
  if (mode >= 0 || pl.n_flash <= from) return mode > 0 && pl.n_flash > from;
  const int64_t groups = pl.n_flash - from;
  if ((groups + 1) / 2 * yblocks < 3 * static_cast<int64_t>(sms)) return false;
  int64_t keys = 0;
  for (unsigned i = from; i < pl.n_flash; ++i) {
    const int32_t last = pl.grp[static_cast<size_t>(pl.items[2 * i]) + 1] - 1;
    keys += pos[last] - first[last] + 1;
  }
  return keys >= 1024 * groups;
}

// For the warp-specialized flash form, which stages each split once for two items: rewrites the
// flash items from `from` to n_flash in place as one (g, g2) entry a block, g2 -1 for none, pairing
// consecutive items whose groups are adjacent rows of one sequence with contiguous positions (so
// every key of their joint range is one either sees), and returns the blocks; 0, with items
// unchanged, when any of those items is split-mode (the form takes whole groups only).
inline unsigned pair_flash_items(Plan& pl, unsigned from, const int32_t* pos, const int32_t* seq) {
  for (unsigned i = from; i < pl.n_flash; ++i)
    if (pl.items[2 * i + 1] >= 0) return 0;
  const auto adjacent = [&](int32_t ga, int32_t gb) {
    const int32_t ra = pl.grp[static_cast<size_t>(ga)], rb = pl.grp[static_cast<size_t>(gb)];
    const int32_t ea = pl.grp[static_cast<size_t>(ga) + 1], eb = pl.grp[static_cast<size_t>(gb) + 1];
    if (seq[ra] != seq[rb]) return false;
    if (eb == ra) return pos[ra] == pos[ra - 1] + 1;
    if (ea == rb) return pos[rb] == pos[rb - 1] + 1;
    return false;
  };
  std::vector<int32_t> out;
  for (unsigned i = from; i < pl.n_flash;) {
    const int32_t g = pl.items[2 * i];
    if (i + 1 < pl.n_flash && adjacent(g, pl.items[2 * i + 2])) {
      out.insert(out.end(), {g, pl.items[2 * i + 2]});
      i += 2;
    } else {
      out.insert(out.end(), {g, -1});
      i += 1;
    }
  }
  std::copy(out.begin(), out.end(), pl.items.begin() + 2 * static_cast<std::ptrdiff_t>(from));
  return static_cast<unsigned>(out.size() / 2);
}

}  // namespace tf::cuda::attn
