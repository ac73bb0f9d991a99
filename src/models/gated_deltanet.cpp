#include "models/gated_deltanet.h"

#include <cstring>

#include "base/error.h"

namespace tf {

namespace {

int cfg_int(const nlohmann::json& j, const std::string& key, int lo, int hi) {
  TF_CHECK(j.contains(key) && j[key].is_number_integer(), "config: field '", key, "' is missing or not an integer");
  const int64_t v = j[key].get<int64_t>();
  TF_CHECK(v >= lo && v <= hi, "config: field '", key, "' = ", v, " is outside [", lo, ", ", hi, "]");
  return static_cast<int>(v);
}

}  // namespace

std::vector<WeightPtr> RowAssembler::stack(const std::string& name, const std::vector<Piece>& pieces, int64_t cols,
                                           const std::vector<int64_t>& splits) {
  TF_CHECK(!pieces.empty() && cols > 0, "stack ", name, ": nothing to stack");
  const TensorView& first = src_.get(pieces[0].tensor);
  const DType dt = first.dtype;
  const uint64_t rb = dtype_row_bytes(dt, static_cast<uint64_t>(cols));
  TF_CHECK(rb > 0, "stack ", name, ": ", cols, " columns do not fit ", dtype_name(dt), " rows");
  int64_t total = 0;
  for (const Piece& pc : pieces) {
    const TensorView& t = src_.get(pc.tensor);
    TF_CHECK(t.dtype == dt && t.shape.size() == 2 && t.shape[1] == cols && pc.row0 >= 0 && pc.rows > 0 &&
                 pc.row0 + pc.rows <= t.shape[0] && t.nbytes == static_cast<uint64_t>(t.shape[0]) * rb,
             src_.describe(), ": tensor ", pc.tensor, " (", dtype_name(t.dtype), ", ", t.shape.size(),
             "-D) does not hold rows [", pc.row0, ", ", pc.row0 + pc.rows, ") of ", cols, " ", dtype_name(dt),
             " columns");
    total += pc.rows;
  }
  int64_t split_sum = 0;
  for (int64_t n : splits) split_sum += n;
  TF_CHECK(split_sum == total, "stack ", name, ": splits cover ", split_sum, " of ", total, " rows");
  auto buf = std::make_unique<uint8_t[]>(static_cast<size_t>(static_cast<uint64_t>(total) * rb));
  uint8_t* p = buf.get();
  for (const Piece& pc : pieces) {
    const TensorView& t = src_.get(pc.tensor);
    const uint64_t n = static_cast<uint64_t>(pc.rows) * rb;
    std::memcpy(p, t.data + static_cast<uint64_t>(pc.row0) * rb, n);
    p += n;
  }
  std::vector<WeightPtr> out;
  int64_t row = 0;
  for (size_t i = 0; i < splits.size(); ++i) {
    TensorView v;
    v.name = splits.size() == 1 ? name : cat(name, "[", i, "]");
    v.dtype = dt;
    v.shape = {splits[i], cols};
    v.data = buf.get() + static_cast<uint64_t>(row) * rb;
    v.nbytes = static_cast<uint64_t>(splits[i]) * rb;
    out.push_back(backend_.load_weight(v));
    row += splits[i];
  }
  bytes_ += static_cast<uint64_t>(total) * rb;
  store_.push_back(std::move(buf));
  return out;
}

WeightPtr RowAssembler::reshaped(const std::string& tensor, int64_t rows, int64_t cols) {
  const TensorView& t = src_.get(tensor);
  TF_CHECK(t.numel() == rows * cols && !t.shape.empty() && t.shape[0] == rows, src_.describe(), ": tensor ", tensor,
           " has ", t.numel(), " elements, expected [", rows, " x ", cols, "]");
  TensorView v = t;
  v.shape = {rows, cols};
  bytes_ += t.nbytes;
  return backend_.load_weight(v);
}

void RowAssembler::check_shape(const std::string& tensor, const std::vector<int64_t>& shape) const {
  const TensorView& t = src_.get(tensor);
  if (t.shape == shape) return;
  std::string want, got;
  for (int64_t d : shape) want += cat(want.empty() ? "" : ", ", d);
  for (int64_t d : t.shape) got += cat(got.empty() ? "" : ", ", d);
  fail(src_.describe(), ": tensor ", tensor, " has shape [", got, "], config expects [", want, "]");
}

WeightPtr RowAssembler::tiled_vector(const std::string& tensor, int64_t n, int64_t times) {
  const TensorView& t = src_.get(tensor);
  const uint64_t rb = dtype_row_bytes(t.dtype, static_cast<uint64_t>(n));
  TF_CHECK(t.shape.size() == 1 && t.shape[0] == n && rb > 0 && t.nbytes == rb && times > 0, src_.describe(),
           ": tensor ", tensor, " is not a vector of ", n);
  auto buf = std::make_unique<uint8_t[]>(static_cast<size_t>(rb * static_cast<uint64_t>(times)));
  for (int64_t i = 0; i < times; ++i) std::memcpy(buf.get() + static_cast<uint64_t>(i) * rb, t.data, rb);
  TensorView v = t;
  v.shape = {1, n * times};
  v.data = buf.get();
  v.nbytes = rb * static_cast<uint64_t>(times);
  bytes_ += v.nbytes;
  store_.push_back(std::move(buf));
  return backend_.load_weight(v);
}

std::vector<int64_t> qkvz_row_order(int kh, int vh, int dk, int dv) {
  const int64_t rep = vh / kh, group = 2 * dk + 2 * rep * dv;
  std::vector<int64_t> rows;
  auto part = [&](int64_t begin, int64_t n) {
    for (int64_t g = 0; g < kh; ++g)
      for (int64_t i = 0; i < n; ++i) rows.push_back(g * group + begin + i);
  };
  part(0, dk);                     // q
  part(dk, dk);                    // k
  part(2 * dk, rep * dv);          // v
  part(2 * dk + rep * dv, rep * dv);  // z
  return rows;
}

std::vector<int64_t> ba_row_order(int kh, int vh) {
  const int64_t rep = vh / kh;
  std::vector<int64_t> rows;
  for (int64_t part = 0; part < 2; ++part)
    for (int64_t g = 0; g < kh; ++g)
      for (int64_t i = 0; i < rep; ++i) rows.push_back(g * 2 * rep + part * rep + i);
  return rows;
}

namespace {

// Consecutive source rows merged into pieces.
std::vector<RowAssembler::Piece> pieces_of(const std::string& tensor, const std::vector<int64_t>& order) {
  std::vector<RowAssembler::Piece> out;
  for (int64_t r : order) {
    if (!out.empty() && out.back().row0 + out.back().rows == r) ++out.back().rows;
    else out.push_back({tensor, r, 1});
  }
  return out;
}

}  // namespace

DeltaNetBlock load_deltanet(WeightLoader& L, RowAssembler& R, const std::string& p, const nlohmann::json& cfg,
                            int64_t hidden, float eps, bool fused) {
  DeltaNetBlock d;
  d.p.k_heads = cfg_int(cfg, "linear_num_key_heads", 1, 4096);
  d.p.v_heads = cfg_int(cfg, "linear_num_value_heads", 1, 4096);
  d.p.k_dim = cfg_int(cfg, "linear_key_head_dim", 1, 4096);
  d.p.v_dim = cfg_int(cfg, "linear_value_head_dim", 1, 4096);
  d.conv_k = cfg_int(cfg, "linear_conv_kernel_dim", 1, 64);
  // transformers' torch_chunk_gated_delta_rule is called with its default chunk of 64.
  d.p.chunk = 64;
  TF_CHECK(d.p.v_heads % d.p.k_heads == 0, "config: linear_num_value_heads ", d.p.v_heads,
           " is not a multiple of linear_num_key_heads ", d.p.k_heads);
  if (cfg.contains("hidden_act"))
    TF_CHECK(cfg["hidden_act"] == "silu", "config: hidden_act ", cfg["hidden_act"].dump(), " is not supported (silu)");
  const int64_t kd = int64_t{d.p.k_heads} * d.p.k_dim, vd = int64_t{d.p.v_heads} * d.p.v_dim;
  d.conv_dim = 2 * kd + vd;
  d.eps = eps;
  if (fused) {
    R.check_shape(p + "in_proj_qkvz.weight", {2 * kd + 2 * vd, hidden});
    R.check_shape(p + "in_proj_ba.weight", {2 * int64_t{d.p.v_heads}, hidden});
    auto qkvz = R.stack(p + "in_proj_qkvz.weight",
                        pieces_of(p + "in_proj_qkvz.weight", qkvz_row_order(d.p.k_heads, d.p.v_heads, d.p.k_dim, d.p.v_dim)),
                        hidden, {d.conv_dim, vd});
    d.in_qkv = std::move(qkvz[0]);
    d.in_z = std::move(qkvz[1]);
    d.in_ba = std::move(R.stack(p + "in_proj_ba.weight",
                                pieces_of(p + "in_proj_ba.weight", ba_row_order(d.p.k_heads, d.p.v_heads)), hidden,
                                {2 * int64_t{d.p.v_heads}})[0]);
  } else {
    R.check_shape(p + "in_proj_qkv.weight", {d.conv_dim, hidden});
    R.check_shape(p + "in_proj_z.weight", {vd, hidden});
    R.check_shape(p + "in_proj_b.weight", {d.p.v_heads, hidden});
    R.check_shape(p + "in_proj_a.weight", {d.p.v_heads, hidden});
    auto qkvz = R.stack(p + "in_proj_qkv+z",
                        {{p + "in_proj_qkv.weight", 0, d.conv_dim}, {p + "in_proj_z.weight", 0, vd}}, hidden,
                        {d.conv_dim, vd});
    d.in_qkv = std::move(qkvz[0]);
    d.in_z = std::move(qkvz[1]);
    d.in_ba = std::move(R.stack(p + "in_proj_b+a",
                                {{p + "in_proj_b.weight", 0, d.p.v_heads}, {p + "in_proj_a.weight", 0, d.p.v_heads}},
                                hidden, {2 * int64_t{d.p.v_heads}})[0]);
  }
  d.conv = R.reshaped(p + "conv1d.weight", d.conv_dim, d.conv_k);
  TF_CHECK(!L.has(p + "conv1d.bias"), p, "conv1d.bias: a conv bias is not expected here");
  d.A_log = L.vector(p + "A_log", d.p.v_heads);
  d.dt_bias = L.vector(p + "dt_bias", d.p.v_heads);
  // The gated norm's weight is per v-head dim; the op takes one entry per column.
  d.norm = R.tiled_vector(p + "norm.weight", d.p.v_dim, d.p.v_heads);
  d.out = L.matrix(p + "out_proj.weight", hidden, vd);
  return d;
}

void deltanet_forward(Backend& b, const DeltaNetBlock& d, Tensor in, Tensor out, DeltaNetScratch& s,
                      const RowLayout& rows, const StateRefs& st) {
  const int64_t m = in.rows;
  const int64_t kd = int64_t{d.p.k_heads} * d.p.k_dim, vd = int64_t{d.p.v_heads} * d.p.v_dim;
  Tensor qkv{s.qkv.data, m, d.conv_dim}, z{s.z.data, m, vd}, ba{s.ba.data, m, 2 * int64_t{d.p.v_heads}};
  Tensor conv{s.conv.data, m, d.conv_dim}, y{s.y.data, m, vd}, normed{s.normed.data, m, vd};
  b.matmul_many(in, {{d.in_qkv.get(), nullptr, qkv}, {d.in_z.get(), nullptr, z}, {d.in_ba.get(), nullptr, ba}});
  b.conv1d_causal(qkv, *d.conv, nullptr, /*silu=*/true, rows, st, d.state_off, conv);
  const int64_t delta_off = d.state_off + (d.conv_k - 1) * d.conv_dim;
  b.gated_delta(Cols{conv, 0}, Cols{conv, kd}, Cols{conv, 2 * kd}, Cols{ba, d.p.v_heads}, Cols{ba, 0}, *d.A_log,
                *d.dt_bias, d.p, rows, st, delta_off, y);
  b.gated_rmsnorm(y, Cols{z, 0}, *d.norm, d.p.v_dim, d.eps, /*norm_first=*/true, normed);
  b.matmul(normed, *d.out, nullptr, out);
}

}  // namespace tf
