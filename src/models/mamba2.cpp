#include "models/mamba2.h"

#include "base/error.h"

namespace tf {

Mamba2Block load_mamba2(WeightLoader& L, const std::string& p, const Mamba2Sizes& sz) {
  Mamba2Block m;
  m.p = sz.p;
  const SsmParams& s = sz.p;
  TF_CHECK(s.heads > 0 && s.head_dim > 0 && s.groups > 0 && s.state_size > 0 && s.heads % s.groups == 0 &&
               s.chunk > 0 && sz.conv_k >= 1,
           p, ": mamba sizes heads ", s.heads, " x ", s.head_dim, ", groups ", s.groups, ", state ", s.state_size,
           ", chunk ", s.chunk, ", conv ", sz.conv_k, " are not usable");
  m.inter = static_cast<int64_t>(s.heads) * s.head_dim;
  m.conv_dim = m.inter + 2 * static_cast<int64_t>(s.groups) * s.state_size;
  m.conv_k = sz.conv_k;
  m.norm_group = m.inter / s.groups;
  m.eps = sz.eps;
  const int64_t H = sz.hidden, proj = m.inter + m.conv_dim + s.heads;
  m.in_z = L.row_slice(p + "in_proj.weight", proj, 0, m.inter, H);
  m.in_xbc = L.row_slice(p + "in_proj.weight", proj, m.inter, m.conv_dim, H);
  m.in_dt = L.row_slice(p + "in_proj.weight", proj, m.inter + m.conv_dim, s.heads, H);
  TF_CHECK(!L.has(p + "in_proj.bias") && !L.has(p + "out_proj.bias"), p,
           ": mamba in_proj / out_proj biases (use_bias) are not supported");
  m.conv_w = L.squeezed(p + "conv1d.weight", m.conv_dim, m.conv_k);
  if (sz.conv_bias) m.conv_b = L.vector(p + "conv1d.bias", m.conv_dim);
  m.A_log = L.vector(p + "A_log", s.heads);
  m.D = L.vector(p + "D", s.heads);
  m.dt_bias = L.vector(p + "dt_bias", s.heads);
  m.norm = L.vector(p + "norm.weight", m.inter);
  m.out_proj = L.matrix(p + "out_proj.weight", H, m.inter);
  return m;
}

Mamba2Scratch alloc_mamba2_scratch(Backend& b, const Mamba2Block& m, int64_t rows) {
  Mamba2Scratch s;
  s.z = b.alloc(rows, m.inter);
  s.xbc = b.alloc(rows, m.conv_dim);
  s.dt = b.alloc(rows, m.p.heads);
  s.y = b.alloc(rows, m.inter);
  return s;
}

void free_mamba2_scratch(Backend& b, Mamba2Scratch& s) {
  for (Tensor* t : {&s.z, &s.xbc, &s.dt, &s.y})
    if (t->data) b.free(*t);
}

void mamba2_forward(Backend& b, const Mamba2Block& m, Tensor in, Tensor out, const Mamba2Scratch& s,
                    const RowLayout& rows, const StateRefs& st, int64_t off) {
  const int64_t n = in.rows;
  TF_CHECK(n <= s.z.rows && s.z.cols == m.inter && s.xbc.cols == m.conv_dim && s.dt.cols == m.p.heads,
           "mamba2: scratch does not fit a round of ", n, " rows");
  Tensor z{s.z.data, n, m.inter}, xbc{s.xbc.data, n, m.conv_dim}, dt{s.dt.data, n, m.p.heads},
      y{s.y.data, n, m.inter};
  b.matmul_many(in, {{m.in_z.get(), nullptr, z}, {m.in_xbc.get(), nullptr, xbc}, {m.in_dt.get(), nullptr, dt}});
  b.conv1d_causal(xbc, *m.conv_w, m.conv_b.get(), /*silu=*/true, rows, st, off, xbc);
  const int64_t gn = static_cast<int64_t>(m.p.groups) * m.p.state_size;
  b.ssm_scan(Cols{xbc, 0}, Cols{xbc, m.inter}, Cols{xbc, m.inter + gn}, Cols{dt, 0}, *m.A_log, *m.D, *m.dt_bias,
             m.p, rows, st, off + m.conv_floats(), y);
  b.gated_rmsnorm(y, Cols{z, 0}, *m.norm, static_cast<int>(m.norm_group), m.eps, /*norm_first=*/false, y);
  b.matmul(y, *m.out_proj, nullptr, out);
}

}  // namespace tf
