#include "backend/backend.h"

#include <algorithm>

#include "base/error.h"

namespace tf {

MatmulInput parse_matmul_input(const std::string& s) {
  if (s == "f32") return MatmulInput::F32;
  if (s == "bf16") return MatmulInput::BF16;
  fail("matmul input '", s, "': expected f32 or bf16");
}

const char* matmul_input_name(MatmulInput m) { return m == MatmulInput::BF16 ? "bf16" : "f32"; }

void Backend::check_samples(const Tensor& logits, const std::vector<SampleSpec>& specs,
                            const std::vector<PenaltyToken>& pens) {
  std::vector<uint32_t> seen;  // spec index + 1 of each token's last mention, when there are penalties
  for (size_t j = 0; j < specs.size(); ++j) {
    if (specs[j].pen_count > 0 && seen.empty()) seen.assign(static_cast<size_t>(logits.cols), 0);
    const SampleSpec& s = specs[j];
    TF_CHECK(s.row >= 0 && s.row < logits.rows, "sample_rows: row ", s.row, " of ", logits.rows);
    TF_CHECK(s.pen_count == 0 || (s.pen_begin >= 0 && s.pen_count > 0 &&
                                  static_cast<size_t>(s.pen_begin) + static_cast<size_t>(s.pen_count) <= pens.size()),
             "sample_rows: spec ", j, " names penalty tokens [", s.pen_begin, ", +", s.pen_count, ") of ", pens.size());
    for (int32_t k = 0; k < s.pen_count; ++k) {
      const int32_t id = pens[static_cast<size_t>(s.pen_begin + k)].id;
      TF_CHECK(id >= 0 && id < logits.cols, "sample_rows: penalty token ", id, " outside the vocabulary");
      TF_CHECK(seen[static_cast<size_t>(id)] != j + 1, "sample_rows: penalty token ", id, " twice in spec ", j);
      seen[static_cast<size_t>(id)] = static_cast<uint32_t>(j + 1);
    }
  }
}

void Backend::sample_rows(const Tensor& logits, const std::vector<SampleSpec>& specs,
                          const std::vector<PenaltyToken>& pens, int32_t* ids) {
  check_samples(logits, specs, pens);
  std::vector<float> row(static_cast<size_t>(logits.cols));
  for (size_t j = 0; j < specs.size(); ++j) {
    to_host(logits.slice_rows(specs[j].row, 1), row.data());
    ids[j] = sample_row(row.data(), static_cast<int32_t>(logits.cols), specs[j], pens.data() + specs[j].pen_begin);
  }
}

void check_row(const RowLayout& rows, int r, int first, const KvStorage& kv, const char* op) {
  const int32_t s = rows.seq[static_cast<size_t>(r)], pos = rows.pos[static_cast<size_t>(r)];
  TF_CHECK(s >= 0 && static_cast<size_t>(s) < rows.seq_pages.size(), op, ": row ", r, " has seq ",
           s, " but the layout has ", rows.seq_pages.size(), " sequences");
  TF_CHECK(pos >= 0, op, ": row ", r, " has position ", pos);
  const auto& pages = rows.seq_pages[static_cast<size_t>(s)];
  const int64_t last = pos / kv.page_size;
  TF_CHECK(last < static_cast<int64_t>(pages.size()), op, ": row ", r, " at position ", pos,
           " needs page ", last, " of seq ", s, " which has ", pages.size(), " pages");
  for (int64_t i = std::max(0, first) / kv.page_size; i <= last; ++i) {
    const int32_t id = pages[static_cast<size_t>(i)];
    TF_CHECK(id >= 0 && id < kv.pages, op, ": seq ", s, " page ", i, " has id ", id, " outside ",
             kv.pages, " pages");
  }
}

void check_layout(const RowLayout& rows, int64_t m, const char* op) {
  TF_CHECK(static_cast<int64_t>(rows.pos.size()) == m && static_cast<int64_t>(rows.seq.size()) == m,
           op, ": layout has ", rows.pos.size(), " positions and ", rows.seq.size(),
           " seq ids for ", m, " rows");
}

}  // namespace tf
