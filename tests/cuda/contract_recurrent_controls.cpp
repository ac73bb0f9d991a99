// Planted faults for the hybrid-model ops: each wraps the real op into a deliberately wrong
// variant that one of the gates must catch. They live only in this test binary.
#include <functional>
#include <set>
#include <vector>

#include "base/dtype.h"
#include "contract_recurrent.h"

namespace tf::contract {

namespace {

// Runs op on a fresh zero-filled pool in place of the round's source slots, then copies the
// states it wrote to the real destination slots: a kernel that ignores the incoming state.
void from_zero_state(Backend& be, const RowLayout& rows, const StateRefs& st, int64_t off, int64_t floats,
                     const std::function<void(const StateRefs&)>& op) {
  const int64_t n = static_cast<int64_t>(st.src.size());
  Tensor fresh = be.alloc(2 * n, st.slot_floats);
  StateRefs z = st;
  z.pool = fresh.data;
  for (int64_t s = 0; s < n; ++s) z.src[static_cast<size_t>(s)] = static_cast<int32_t>(2 * s),
                                  z.dst[static_cast<size_t>(s)] = static_cast<int32_t>(2 * s + 1);
  op(z);
  std::set<int32_t> seqs(rows.seq.begin(), rows.seq.end());
  for (int32_t s : seqs)
    be.copy(Tensor{fresh.row(2 * s + 1) + off, 1, floats},
            Tensor{st.pool + st.dst[static_cast<size_t>(s)] * st.slot_floats + off, 1, floats});
  be.free(fresh);
}

}  // namespace

SigTopkFn control_sigmoid_topk_no_groups() {
  return [](Backend& be, const Tensor& x, const Weight* b, int, int, int k, bool norm, float sc, int32_t* i, float* w) {
    be.topk_sigmoid_grouped(x, b, 1, 1, k, norm, sc, i, w);
  };
}

ActivateFn control_activate_bf16() {
  return [](Backend& be, Act a, const Tensor& x, Tensor o) {
    be.activate(a, x, o);
    std::vector<float> h(static_cast<size_t>(o.rows * o.cols));
    be.to_host(o, h.data());
    for (float& v : h) v = round_to_bf16(v);
    be.from_host(h.data(), o);
  };
}

MulSigFn control_mul_sigmoid_col0() {
  return [](Backend& be, Tensor y, Cols g) { be.mul_sigmoid(y, Cols{g.t, 0}); };
}

GatedNormFn control_gated_rmsnorm_whole_row() {
  return [](Backend& be, const Tensor& x, Cols z, const Weight& g, int, float eps, bool nf, Tensor y) {
    be.gated_rmsnorm(x, z, g, static_cast<int>(x.cols), eps, nf, y);
  };
}

ConvFn control_conv_zero_state() {
  return [](Backend& be, const Tensor& x, const Weight& w, const Weight* b, bool silu, const RowLayout& r,
            const StateRefs& st, int64_t off, Tensor out) {
    from_zero_state(be, r, st, off, (w.cols - 1) * x.cols,
                    [&](const StateRefs& z) { be.conv1d_causal(x, w, b, silu, r, z, off, out); });
  };
}

SsmFn control_ssm_chunk_by_rows() {
  return [](Backend& be, Cols x, Cols B, Cols C, Cols dt, const Weight& al, const Weight& D, const Weight& db,
            const SsmParams& p, const RowLayout& r, const StateRefs& st, int64_t off, Tensor y) {
    SsmParams q = p;
    if (y.rows % 2 == 1 && q.chunk > 1) q.chunk -= 1;
    be.ssm_scan(x, B, C, dt, al, D, db, q, r, st, off, y);
  };
}

SsmFn control_ssm_no_keep() {
  return [](Backend& be, Cols x, Cols B, Cols C, Cols dt, const Weight& al, const Weight& D, const Weight& db,
            const SsmParams& p, const RowLayout& r, const StateRefs& st, int64_t off, Tensor y) {
    StateRefs s = st;
    for (auto& k : s.keep) k.clear();
    be.ssm_scan(x, B, C, dt, al, D, db, p, r, s, off, y);
  };
}

DeltaFn control_delta_chunk_by_rows() {
  return [](Backend& be, Cols q, Cols k, Cols v, Cols a, Cols b, const Weight& al, const Weight& db,
            const DeltaParams& p, const RowLayout& r, const StateRefs& st, int64_t off, Tensor y) {
    DeltaParams d = p;
    if (y.rows % 2 == 1 && d.chunk > 1) d.chunk -= 1;
    be.gated_delta(q, k, v, a, b, al, db, d, r, st, off, y);
  };
}

DeltaFn control_delta_zero_state() {
  return [](Backend& be, Cols q, Cols k, Cols v, Cols a, Cols b, const Weight& al, const Weight& db,
            const DeltaParams& p, const RowLayout& r, const StateRefs& st, int64_t off, Tensor y) {
    from_zero_state(be, r, st, off, static_cast<int64_t>(p.v_heads) * p.k_dim * p.v_dim,
                    [&](const StateRefs& z) { be.gated_delta(q, k, v, a, b, al, db, p, r, z, off, y); });
  };
}

CopyFn control_copy_short() {
  return [](Backend& be, const Tensor& s, Tensor d) {
    if (s.rows > 1) be.copy(s.slice_rows(0, s.rows - 1), d.slice_rows(0, d.rows - 1));
  };
}

}  // namespace tf::contract
