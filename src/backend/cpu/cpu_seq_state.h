#pragma once
// Checks a round's sequences and recurrent state slots for the CPU backend's recurrent ops.
#include <algorithm>
#include <cstdint>
#include <vector>

#include "backend/backend.h"
#include "base/error.h"

namespace tf::cpu {

// The contiguous rows [begin, begin + n) of one sequence of the round.
struct SeqSpan {
  int64_t begin = 0, n = 0;
};

// Validates rows and st for an op over m rows whose state is `need` floats at offset off of a
// slot; returns each sequence's rows. Slots read (src) are never written by the round.
inline std::vector<SeqSpan> seq_spans(const RowLayout& rows, const StateRefs& st, int64_t off, int64_t need,
                                      int64_t m, const char* op) {
  TF_CHECK(rows.rows() == m && rows.seq.size() == rows.pos.size(), op, ": ", m, " rows but the layout has ",
           rows.pos.size(), " positions and ", rows.seq.size(), " sequence ids");
  const size_t S = st.src.size();
  TF_CHECK(m == 0 || S > 0, op, ": recurrent state refs are empty for a round of ", m, " rows");
  TF_CHECK(st.dst.size() == S && st.step.size() == S && (st.keep.empty() || st.keep.size() == S), op,
           ": state refs of ", S, " sequences have ", st.dst.size(), " dst, ", st.step.size(), " step and ",
           st.keep.size(), " keep entries");
  TF_CHECK(S == 0 || (st.pool != nullptr && st.slot_floats > 0), op, ": state pool is null or has slots of ",
           st.slot_floats, " floats");
  TF_CHECK(off >= 0 && need > 0 && off <= st.slot_floats && need <= st.slot_floats - off, op, ": state of ", need,
           " floats at offset ", off, " does not fit a slot of ", st.slot_floats, " floats");
  std::vector<SeqSpan> spans(S, SeqSpan{-1, 0});
  for (int64_t r = 0; r < m; ++r) {
    const int32_t s = rows.seq[static_cast<size_t>(r)];
    TF_CHECK(s >= 0 && static_cast<size_t>(s) < S, op, ": row ", r, " belongs to sequence ", s, " of ", S);
    SeqSpan& sp = spans[static_cast<size_t>(s)];
    if (sp.n == 0) {
      sp.begin = r;
    } else {
      TF_CHECK(sp.begin + sp.n == r, op, ": rows of sequence ", s, " are not contiguous (row ", r, ")");
      TF_CHECK(rows.pos[static_cast<size_t>(r)] == rows.pos[static_cast<size_t>(r - 1)] + 1, op, ": row ", r,
               " of sequence ", s, " is at position ", rows.pos[static_cast<size_t>(r)], " after position ",
               rows.pos[static_cast<size_t>(r - 1)]);
    }
    ++sp.n;
  }
  std::vector<int32_t> reads, writes;
  for (size_t s = 0; s < S; ++s) {
    TF_CHECK(spans[s].n > 0, op, ": sequence ", s, " has state refs but no rows");
    TF_CHECK(st.slots == 0 || (st.src[s] < st.slots && st.dst[s] < st.slots), op, ": sequence ", s,
             " uses a slot past the pool's ", st.slots);
    TF_CHECK(st.src[s] >= 0 && st.dst[s] >= 0 && st.src[s] != st.dst[s], op, ": sequence ", s, " reads slot ",
             st.src[s], " and writes slot ", st.dst[s]);
    TF_CHECK(st.step[s] <= 1, op, ": sequence ", s, " has step flag ", int(st.step[s]));
    reads.push_back(st.src[s]);
    writes.push_back(st.dst[s]);
    if (!st.keep.empty() && !st.keep[s].empty()) {
      TF_CHECK(st.step[s] == 1 && st.keep_pool != nullptr, op, ": sequence ", s,
               " keeps per-row states but is not a step-form sequence with a keep pool");
      TF_CHECK(static_cast<int64_t>(st.keep[s].size()) == spans[s].n - 1, op, ": sequence ", s, " of ",
               spans[s].n, " rows has ", st.keep[s].size(), " keep slots");
      for (int32_t k : st.keep[s])
        TF_CHECK(k >= 0 && (st.keep_slots == 0 || k < st.keep_slots), op, ": sequence ", s, " has keep slot ", k);
    }
  }
  // Sequences run in parallel: a slot written by one must not be read or written by another.
  std::sort(reads.begin(), reads.end());
  std::vector<int32_t> w = writes;
  std::sort(w.begin(), w.end());
  TF_CHECK(std::adjacent_find(w.begin(), w.end()) == w.end(), op, ": two sequences write the same state slot");
  for (int32_t d : w)
    TF_CHECK(!std::binary_search(reads.begin(), reads.end(), d), op, ": slot ", d,
             " is both read and written in one round");
  if (!st.keep.empty()) {
    std::vector<int32_t> ks;
    for (const auto& k : st.keep) ks.insert(ks.end(), k.begin(), k.end());
    std::sort(ks.begin(), ks.end());
    TF_CHECK(std::adjacent_find(ks.begin(), ks.end()) == ks.end(), op, ": a keep slot is used twice in one round");
    if (st.keep_pool == st.pool)
      for (int32_t k : ks)
        TF_CHECK(!std::binary_search(reads.begin(), reads.end(), k) && !std::binary_search(w.begin(), w.end(), k),
                 op, ": keep slot ", k, " is also a src or dst slot");
  }
  return spans;
}

inline float* slot_at(float* pool, int64_t slot_floats, int32_t slot, int64_t off) {
  return pool + static_cast<int64_t>(slot) * slot_floats + off;
}

}  // namespace tf::cpu
