// The operand checks every backend shares: a backend's do_* implementation runs only on operands
// that passed these, so the CPU and the GPU refuse the same calls with the same message.
#include "backend/ops.h"

#include <cstring>

#include "lingbot/error.h"

namespace lingbot {
namespace {

std::string shapes(const char* op,
                   std::initializer_list<std::pair<const char*, const Tensor*>> ts) {
  std::string s = op;
  s += ':';
  bool first = true;
  for (const auto& [what, t] : ts) {
    s += first ? " " : ", ";
    s += std::string(what) + " " + shape_str(t->shape());
    first = false;
  }
  return s;
}

}  // namespace

void Backend::check(const Tensor& t, const char* op, const char* what, bool f32) const {
  LINGBOT_CHECK(t.defined() && t.device() == device(),
                std::string(op) + ": " + what + " must be a " +
                    (device() == Device::CPU ? "host" : "CUDA") + " tensor");
  if (f32)
    LINGBOT_CHECK(t.dtype() == DType::F32,
                  std::string(op) + ": " + what + " must be F32, got " + dtype_name(t.dtype()));
  else
    LINGBOT_CHECK(handles(t.dtype()), std::string(op) + ": " + what + " is " +
                                          dtype_name(t.dtype()) +
                                          ", which this backend does not compute in");
}

void Backend::copy(const Tensor& src, Tensor& dst) {
  LINGBOT_CHECK(src.numel() == dst.numel(),
                "copy: " + shape_str(src.shape()) + " into " + shape_str(dst.shape()));
  for (const Tensor* t : {&src, static_cast<const Tensor*>(&dst)})
    LINGBOT_CHECK(t->defined() && t->device() == device(),
                  std::string("copy: ") + (t == &src ? "source" : "destination") +
                      " is not on this backend's device");
  do_copy(src, dst);
}

void Backend::copy_ranges(const std::vector<ByteRange>& ranges) {
  for (const ByteRange& r : ranges)
    LINGBOT_CHECK(r.bytes == 0 || (r.src && r.dst), "copy_ranges: a range without memory");
  do_copy_ranges(ranges);
}

void Backend::fill(Tensor& t, float value) {
  check(t, "fill", "target");
  do_fill(t, value);
}

void Backend::download_async(const Tensor& t, float* host) {
  check(t, "download_async", "source", true);
  do_download_async(t, host);
}

void Backend::download_into(const Tensor& t, float* host) {
  const Tensor h = download(t);
  LINGBOT_CHECK(h.numel() == t.numel(), "download_into: size mismatch");
  if (h.numel()) std::memcpy(host, h.f32(), static_cast<size_t>(h.numel()) * sizeof(float));
}

void Backend::read_bytes(const void* src, void* host, size_t bytes) {
  if (bytes) std::memcpy(host, src, bytes);
}

void Backend::write_bytes(const void* host, void* dst, size_t bytes) {
  if (bytes) std::memcpy(dst, host, bytes);
}

void Backend::attention_planned(const Tensor& q, int list, float scale, Tensor& out) {
  LINGBOT_CHECK(list >= 0 && list < static_cast<int>(planned_.size()),
                "attention_planned: list " + std::to_string(list) + " is not in the plan");
  check_query(q, out);
  do_attention_planned(q, list, scale, out);
}
void Backend::do_attention_planned(const Tensor& q, int list, float scale, Tensor& out) {
  do_attention(q, planned_[list], scale, out);
}

void Backend::upload_into(const Tensor& host, Tensor& dst) {
  LINGBOT_CHECK(
      host.device() == Device::CPU && host.dtype() == DType::F32 && host.numel() == dst.numel(),
      "upload_into: " + shape_str(host.shape()) + " " + dtype_name(host.dtype()) + " into " +
          shape_str(dst.shape()));
  check(dst, "upload_into", "destination");
  do_upload_into(host, dst);
}

void Backend::do_upload_into(const Tensor& host, Tensor& dst) {
  Tensor t = upload(host, dst.dtype());
  copy(t, dst);
}

void Backend::check_linear(const char* op, const Tensor& x, const Tensor& w, const Tensor* b,
                           const Tensor& y) const {
  check(x, op, "input");
  check(w, op, "weight");
  check(y, op, "output");
  if (b) check(*b, op, "bias");
  LINGBOT_CHECK(w.rank() == 2 && w.dim(1) > 0, shapes(op, {{"weight", &w}}));
  const int64_t k = w.dim(1), n = w.dim(0), m = x.numel() / k;
  LINGBOT_CHECK(x.numel() == m * k && y.numel() == m * n,
                shapes(op, {{"input", &x}, {"weight", &w}, {"output", &y}}));
  if (b) LINGBOT_CHECK(b->numel() == n, shapes(op, {{"weight", &w}, {"bias", b}}));
}

void Backend::linear(const Tensor& x, const Tensor& w, const Tensor* b, Tensor& y, Act act) {
  check_linear("linear", x, w, b, y);
  do_linear(x, w, b, y, act);
}

void Backend::linear_add(const Tensor& x, const Tensor& w, const Tensor* b, Tensor& y) {
  check_linear("linear_add", x, w, b, y);
  do_linear_add(x, w, b, y);
}

void Backend::check_layer_norm(const char* op, const Tensor& x, const Tensor* w, const Tensor* b,
                               const Tensor& y) const {
  check(x, op, "input");
  check(y, op, "output");
  if (w) check(*w, op, "weight");
  if (b) check(*b, op, "bias");
  LINGBOT_CHECK(x.rank() >= 1 && y.numel() == x.numel(),
                shapes(op, {{"input", &x}, {"output", &y}}));
  const int64_t n = x.dim(-1);
  if (w) LINGBOT_CHECK(w->numel() == n, shapes(op, {{"input", &x}, {"weight", w}}));
  if (b) LINGBOT_CHECK(b->numel() == n, shapes(op, {{"input", &x}, {"bias", b}}));
}

void Backend::layer_norm(const Tensor& x, const Tensor* w, const Tensor* b, float eps, Tensor& y) {
  check_layer_norm("layer_norm", x, w, b, y);
  do_layer_norm(x, w, b, eps, y);
}

void Backend::layer_norm_linear(const Tensor& x, const Tensor* norm_w, const Tensor* norm_b,
                                float eps, Tensor& normed, const Tensor& w, const Tensor* b,
                                Tensor& y, Act act) {
  check_layer_norm("layer_norm_linear", x, norm_w, norm_b, normed);
  check_linear("layer_norm_linear", normed, w, b, y);
  do_layer_norm_linear(x, norm_w, norm_b, eps, normed, w, b, y, act);
}

void Backend::do_layer_norm_linear(const Tensor& x, const Tensor* norm_w, const Tensor* norm_b,
                                   float eps, Tensor& normed, const Tensor& w, const Tensor* b,
                                   Tensor& y, Act act) {
  do_layer_norm(x, norm_w, norm_b, eps, normed);
  do_linear(normed, w, b, y, act);
}

void Backend::add(Tensor& x, const Tensor& y, const Tensor* gamma, float alpha) {
  check(x, "add", "target");
  check(y, "add", "operand");
  if (gamma) check(*gamma, "add", "gamma");
  const int64_t n = x.numel(), ny = y.numel();
  LINGBOT_CHECK(x.rank() >= 1 && ny > 0 && n % ny == 0,
                "add: cannot broadcast " + shape_str(y.shape()) + " onto " + shape_str(x.shape()));
  if (gamma)
    LINGBOT_CHECK(gamma->numel() == x.dim(-1), shapes("add", {{"target", &x}, {"gamma", gamma}}));
  do_add(x, y, gamma, alpha);
}

void Backend::activate(Tensor& x, Act act) {
  check(x, "activate", "tensor");
  do_activate(x, act);
}

void Backend::concat_last(const Tensor& a, const Tensor& b, Tensor& y) {
  check(a, "concat_last", "a");
  check(b, "concat_last", "b");
  check(y, "concat_last", "output");
  LINGBOT_CHECK(a.dtype() == b.dtype() && a.dtype() == y.dtype(),
                "concat_last: operands and output must share a dtype");
  const auto what = shapes("concat_last", {{"a", &a}, {"b", &b}, {"output", &y}});
  LINGBOT_CHECK(a.rank() >= 1 && b.rank() >= 1 && a.dim(-1) > 0 && b.dim(-1) > 0, what);
  const int64_t ca = a.dim(-1), cb = b.dim(-1), m = a.numel() / ca;
  LINGBOT_CHECK(b.numel() / cb == m && y.numel() == m * (ca + cb), what);
  do_concat_last(a, b, y);
}

void Backend::transpose_last2(const Tensor& x, Tensor& y) {
  check(x, "transpose_last2", "input");
  check(y, "transpose_last2", "output");
  LINGBOT_CHECK(x.dtype() == y.dtype(), "transpose_last2: input and output must share a dtype");
  LINGBOT_CHECK(x.rank() >= 2 && y.numel() == x.numel(),
                shapes("transpose_last2", {{"input", &x}, {"output", &y}}));
  do_transpose_last2(x, y);
}

void Backend::split_qkv(const Tensor& qkv, const QKNorm* norm, const Rope* rope, Tensor& q,
                        Tensor& k, Tensor& v, const KVDestination* into) {
  check(qkv, "split_qkv", "qkv");
  check(q, "split_qkv", "q");
  check(k, "split_qkv", "k");
  check(v, "split_qkv", "v");
  LINGBOT_CHECK(k.dtype() == q.dtype() && v.dtype() == q.dtype(),
                "split_qkv: q, k and v must share a dtype");
  const auto what = shapes("split_qkv", {{"qkv", &qkv}, {"q", &q}});
  LINGBOT_CHECK(q.rank() >= 2 && q.dim(-1) > 0 && q.dim(-2) > 0, what);
  const int64_t h = q.dim(-2), d = q.dim(-1), rows = q.numel() / (h * d);
  LINGBOT_CHECK(qkv.numel() == rows * 3 * h * d && k.numel() == q.numel() && v.numel() == q.numel(),
                what);
  if (norm) {
    for (const Tensor* t : {norm->q_weight, norm->q_bias, norm->k_weight, norm->k_bias}) {
      if (!t) continue;
      check(*t, "split_qkv", "norm parameter");
      LINGBOT_CHECK(t->numel() == d, "split_qkv: norm parameter " + shape_str(t->shape()) +
                                         " for head_dim " + std::to_string(d));
    }
  }
  if (rope) {
    check(rope->cos, "split_qkv", "rope cos", true);
    check(rope->sin, "split_qkv", "rope sin", true);
    LINGBOT_CHECK(d % (rope->pairs == RopePairs::HalfSplit ? 4 : 2) == 0,
                  "split_qkv: head_dim " + std::to_string(d) + " does not split into rope pairs");
    LINGBOT_CHECK(rope->cos.numel() >= rows * (d / 2) && rope->sin.numel() == rope->cos.numel(),
                  "split_qkv: rope tables " + shape_str(rope->cos.shape()) + " do not cover " +
                      std::to_string(rows) + " rows");
  }
  if (!into) {
    do_split_qkv(qkv, norm, rope, q, k, v);
    return;
  }
  const bool f8 = into->dtype == DType::F8E4M3;
  LINGBOT_CHECK(f8 || handles(into->dtype), std::string("split_qkv: cache storage is ") +
                                                dtype_name(into->dtype) +
                                                ", which this backend does not compute in");
  LINGBOT_CHECK(into->rows_per_frame > 0 &&
                    static_cast<int64_t>(into->frames.size()) * into->rows_per_frame == rows,
                "split_qkv: " + std::to_string(into->frames.size()) + " destination frames of " +
                    std::to_string(into->rows_per_frame) + " rows for " + std::to_string(rows) +
                    " rows");
  for (const KVDestination::Frame& f : into->frames) {
    LINGBOT_CHECK(f.k && f.v, "split_qkv: no cache storage to write to");
    if (!f8) continue;
    LINGBOT_CHECK(f.scales != nullptr, "split_qkv: e4m3 storage needs per-head scales");
    check(*f.scales, "split_qkv", "scales", true);
    LINGBOT_CHECK(f.scales->numel() == 2 * h,
                  shapes("split_qkv", {{"k", &k}, {"scales", f.scales}}));
  }
  do_split_qkv_into(qkv, norm, rope, q, k, v, *into);
}

void Backend::do_split_qkv_into(const Tensor& qkv, const QKNorm* norm, const Rope* rope, Tensor& q,
                                Tensor& k, Tensor& v, const KVDestination& into) {
  do_split_qkv(qkv, norm, rope, q, k, v);
  const int64_t n = into.rows_per_frame;
  const Tensor k3 = k.reshape({-1, k.dim(-2), k.dim(-1)}), v3 = v.reshape(k3.shape());
  for (size_t f = 0; f < into.frames.size(); ++f) {
    const int64_t r0 = static_cast<int64_t>(f) * n;
    const KVDestination::Frame& d = into.frames[f];
    do_store_kv(k3.slice(r0, r0 + n), v3.slice(r0, r0 + n), d.k, d.v, into.dtype,
                into.dtype == DType::F8E4M3 ? d.scales : nullptr);
  }
}

namespace {

// Every attention reads at least one key, and every segment with tokens has its storage.
void check_keys(const std::vector<KVSegment>& kv) {
  int64_t keys = 0;
  for (const KVSegment& s : kv) {
    LINGBOT_CHECK(s.tokens >= 0 && (s.tokens == 0 || (s.k && s.v)),
                  "attention: segment without K/V storage");
    LINGBOT_CHECK(s.scales == kv.front().scales,
                  "attention: segments of one list mix storage dtypes or scales");
    keys += s.tokens;
  }
  LINGBOT_CHECK(keys > 0, "attention over an empty key set");
}

}  // namespace

void Backend::check_query(const Tensor& q, const Tensor& out) const {
  check(q, "attention", "query");
  check(out, "attention", "output");
  LINGBOT_CHECK(q.rank() >= 2 && q.dim(-1) > 0 && q.dim(-2) > 0 && out.numel() == q.numel(),
                shapes("attention", {{"query", &q}, {"output", &out}}));
  LINGBOT_CHECK(q.numel() / (q.dim(-1) * q.dim(-2)) <= 0x7fffffff / 2,
                "attention: too many queries");
}

void Backend::attention(const Tensor& q, const std::vector<KVSegment>& kv, float scale,
                        Tensor& out) {
  check_query(q, out);
  check_keys(kv);
  do_attention(q, kv, scale, out);
}

void Backend::plan_attention(const std::vector<std::vector<KVSegment>>& lists) {
  for (const auto& kv : lists) check_keys(kv);
  planned_ = lists;
  do_plan_attention(lists);
}

void Backend::store_kv(const Tensor& k, const Tensor& v, void* k_dst, void* v_dst, DType dtype,
                       const Tensor* scales) {
  const bool f8 = dtype == DType::F8E4M3;
  // Cached e4m3 rows moving within the cache are bytes to copy; everything else is math input.
  const bool moved = f8 && k.dtype() == DType::F8E4M3;
  if (moved) {
    LINGBOT_CHECK(k.defined() && v.defined() && k.device() == device() && v.device() == device() &&
                      v.dtype() == DType::F8E4M3,
                  "store_kv: e4m3 rows to move must both be e4m3 on this device");
  } else {
    check(k, "store_kv", "k");
    check(v, "store_kv", "v");
  }
  LINGBOT_CHECK(f8 || handles(dtype), std::string("store_kv: cache storage is ") +
                                          dtype_name(dtype) +
                                          ", which this backend does not compute in");
  LINGBOT_CHECK(k.numel() == v.numel(), shapes("store_kv", {{"k", &k}, {"v", &v}}));
  LINGBOT_CHECK(k.numel() == 0 || (k_dst && v_dst), "store_kv: no cache storage to write to");
  if (f8 && !moved) {
    LINGBOT_CHECK(scales != nullptr, "store_kv: e4m3 storage needs per-head scales");
    check(*scales, "store_kv", "scales", true);
    LINGBOT_CHECK(k.rank() >= 2 && scales->numel() == 2 * k.dim(-2),
                  shapes("store_kv", {{"k", &k}, {"scales", scales}}));
  }
  do_store_kv(k, v, k_dst, v_dst, dtype, f8 && !moved ? scales : nullptr);
}

void Backend::fp8_kv_scales(const Tensor& k, const Tensor& v, Tensor& scales) {
  check(k, "fp8_kv_scales", "k");
  check(v, "fp8_kv_scales", "v");
  check(scales, "fp8_kv_scales", "scales", true);
  LINGBOT_CHECK(k.rank() >= 2 && k.shape() == v.shape() && k.dtype() == v.dtype() &&
                    scales.numel() == 2 * k.dim(-2),
                shapes("fp8_kv_scales", {{"k", &k}, {"v", &v}, {"scales", &scales}}));
  do_fp8_kv_scales(k, v, scales);
}

void Backend::patchify(const Tensor& img, int patch, Tensor& rows) {
  check(img, "patchify", "input");
  check(rows, "patchify", "output");
  const auto what = shapes("patchify", {{"input", &img}, {"output", &rows}});
  LINGBOT_CHECK(img.rank() == 4 && patch > 0, what + ", patch " + std::to_string(patch));
  const int64_t s = img.dim(0), c = img.dim(1), h = img.dim(2), w = img.dim(3);
  LINGBOT_CHECK(rows.numel() == s * (h / patch) * (w / patch) * c * patch * patch, what);
  do_patchify(img, patch, rows);
}

void Backend::conv2d(const Tensor& x, const Tensor& w, const Tensor* b, int stride, int pad,
                     Tensor& y, Act act, bool accumulate) {
  LINGBOT_CHECK(act == Act::None || act == Act::ReLU, "conv2d: the only activation is ReLU");
  LINGBOT_CHECK(act == Act::None || !accumulate,
                "conv2d: the epilogue is ReLU or accumulate, not both");
  check(x, "conv2d", "input", true);
  check_conv("conv2d", x.shape(), w, b, stride, pad, y, "input " + shape_str(x.shape()));
  do_conv2d(x, w, b, stride, pad, y, act, accumulate);
}

void Backend::check_conv(const char* op, const Shape& in, const Tensor& w, const Tensor* b,
                         int stride, int pad, const Tensor& y, const std::string& input) const {
  check(w, op, "weight", true);
  check(y, op, "output", true);
  if (b) check(*b, op, "bias", true);
  const std::string what = std::string(op) + ": " + input + ", weight " + shape_str(w.shape()) +
                           ", output " + shape_str(y.shape());
  LINGBOT_CHECK(in.size() == 4 && w.rank() == 4 && y.rank() == 4 && stride > 0 && pad >= 0, what);
  const int64_t kh = w.dim(2), kw = w.dim(3);
  LINGBOT_CHECK(w.dim(1) == in[1] && y.dim(0) == in[0] && y.dim(1) == w.dim(0) &&
                    y.dim(2) == (in[2] + 2 * pad - kh) / stride + 1 &&
                    y.dim(3) == (in[3] + 2 * pad - kw) / stride + 1,
                what);
  if (b) LINGBOT_CHECK(b->numel() == w.dim(0), shapes(op, {{"weight", &w}, {"bias", b}}));
}

void Backend::conv_transpose2d(const Tensor& x, const Tensor& w, const Tensor* b, int stride,
                               Tensor& y) {
  check(x, "conv_transpose2d", "input", true);
  check(w, "conv_transpose2d", "weight", true);
  check(y, "conv_transpose2d", "output", true);
  if (b) check(*b, "conv_transpose2d", "bias", true);
  const std::string what = "conv_transpose2d: kernel must equal stride; input " +
                           shape_str(x.shape()) + ", weight " + shape_str(w.shape()) + ", output " +
                           shape_str(y.shape());
  LINGBOT_CHECK(x.rank() == 4 && w.rank() == 4 && y.rank() == 4, what);
  const int64_t k = w.dim(2);
  LINGBOT_CHECK(k == stride && w.dim(3) == k && w.dim(0) == x.dim(1) && y.dim(0) == x.dim(0) &&
                    y.dim(1) == w.dim(1) && y.dim(2) == x.dim(2) * k && y.dim(3) == x.dim(3) * k,
                what);
  if (b)
    LINGBOT_CHECK(b->numel() == w.dim(1),
                  shapes("conv_transpose2d", {{"weight", &w}, {"bias", b}}));
  do_conv_transpose2d(x, w, b, stride, y);
}

void Backend::upsample_bilinear(const Tensor& x, Tensor& y, const Tensor* add) {
  check(x, "upsample_bilinear", "input", true);
  check(y, "upsample_bilinear", "output", true);
  LINGBOT_CHECK(x.rank() == 4 && y.rank() == 4 && y.dim(0) * y.dim(1) == x.dim(0) * x.dim(1),
                shapes("upsample_bilinear", {{"input", &x}, {"output", &y}}));
  if (add) {
    check(*add, "upsample_bilinear", "addend", true);
    LINGBOT_CHECK(add->numel() > 0 && y.numel() % add->numel() == 0,
                  "upsample_bilinear: cannot broadcast " + shape_str(add->shape()) + " onto " +
                      shape_str(y.shape()));
  }
  do_upsample_bilinear(x, y, add);
}

void Backend::upsample_conv2d(const Tensor& x, const Tensor* add, int64_t ho, int64_t wo,
                              const Tensor& w, const Tensor* b, int stride, int pad, Tensor& y,
                              Act act) {
  // The checks of the two ops it stands for, without the upsampled tensor.
  check(x, "upsample_conv2d", "input", true);
  LINGBOT_CHECK(x.rank() == 4 && ho > 0 && wo > 0,
                "upsample_conv2d: input " + shape_str(x.shape()) + " to " + std::to_string(ho) +
                    "x" + std::to_string(wo));
  const Shape up{x.dim(0), x.dim(1), ho, wo};
  if (add) {
    check(*add, "upsample_conv2d", "addend", true);
    LINGBOT_CHECK(
        add->numel() > 0 && shape_numel(up) % add->numel() == 0,
        "upsample_conv2d: cannot broadcast " + shape_str(add->shape()) + " onto " + shape_str(up));
  }
  LINGBOT_CHECK(act == Act::None || act == Act::ReLU,
                "upsample_conv2d: the only activation is ReLU");
  check_conv("upsample_conv2d", up, w, b, stride, pad, y,
             "input " + shape_str(x.shape()) + " upsampled to " + shape_str(up));
  do_upsample_conv2d(x, add, ho, wo, w, b, stride, pad, y, act);
}

void Backend::do_upsample_conv2d(const Tensor& x, const Tensor* add, int64_t ho, int64_t wo,
                                 const Tensor& w, const Tensor* b, int stride, int pad, Tensor& y,
                                 Act act) {
  Tensor up = alloc({x.dim(0), x.dim(1), ho, wo}, DType::F32);
  do_upsample_bilinear(x, up, add);
  do_conv2d(up, w, b, stride, pad, y, act, false);
}

GpuPath parse_gpu_path(const std::string& name) {
  if (name == "auto") return GpuPath::kAuto;
  if (name == "hopper") return GpuPath::kHopper;
  if (name == "portable") return GpuPath::kPortable;
  throw Error("unknown GPU path '" + name + "' (auto, hopper or portable)",
              ErrorKind::InvalidArgument);
}

}  // namespace lingbot
