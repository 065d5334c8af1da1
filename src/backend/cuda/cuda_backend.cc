// The CUDA backend: validates shapes and dtypes like the CPU reference does, then queues work on
// one stream. Every op is asynchronous except download (and synchronize); errors from a kernel
// surface at the next launch check or at the next synchronising call.
//
// Dtypes: F32 everywhere for the float32 mode; BF16 (and F16 where it costs nothing) for the
// tensors that matter for speed. attention() takes K/V in the same dtype as q: the KV cache is
// stored (store_kv) in the activation dtype that the q/k/v projections produce.
#include <algorithm>
#include <atomic>
#include <cstdio>
#include <cstdlib>
#include <cstring>

#include "backend/cuda/common.h"
#include "backend/cuda/staged_upload.h"

namespace lingbot {
namespace cuda {
namespace {

std::string where(const char* op, const Tensor& t) {
  return std::string(op) + ": " + shape_str(t.shape()) + " " + dtype_name(t.dtype());
}

void check_dev(const Tensor& t, const char* op, const char* what) {
  LINGBOT_CHECK(t.defined() && t.device() == Device::CUDA,
                std::string("cuda backend: ") + op + " " + what + " must be a CUDA tensor");
}

Elt check_float(const Tensor& t, const char* op, const char* what) {
  check_dev(t, op, what);
  return elt_of(t.dtype(), what);
}

void check_f32(const Tensor& t, const char* op, const char* what) {
  check_dev(t, op, what);
  LINGBOT_CHECK(t.dtype() == DType::F32, std::string("cuda backend: ") + op + " " + what +
                                             " must be F32, got " + dtype_name(t.dtype()));
}

size_t round_up(size_t v) {
  return (v + 255) / 256 * 256;
}

class CudaBackend final : public Backend {
 public:
  explicit CudaBackend(std::shared_ptr<Context> ctx) : ctx_(std::move(ctx)) {}
  ~CudaBackend() override {
    ctx_->step.abort(ctx_->stream);
    // Kernels still queued may read tensors the caller is about to free; let them finish.
    cudaStreamSynchronize(ctx_->stream);
    if (std::getenv("LINGBOT_CUDA_VERBOSE")) {
      const auto& c = ctx_->step.counters();
      std::fprintf(stderr,
                   "[lingbot cuda] steps recorded %lld: graph updated %lld, instantiated %lld; "
                   "allocations while recording %lld\n",
                   static_cast<long long>(c.recorded), static_cast<long long>(c.updated),
                   static_cast<long long>(c.instantiated), static_cast<long long>(c.allocations));
    }
  }

  Device device() const override { return Device::CUDA; }
  std::string name() const override {
    return std::string("cuda (") + ctx_->prop.name + ", sm_" + std::to_string(ctx_->prop.major) +
           std::to_string(ctx_->prop.minor) + ")";
  }

  Tensor alloc(const Shape& shape, DType dtype) override {
    return device_tensor(ctx_, shape, dtype);
  }

  Tensor upload(const Tensor& host_in, DType dtype) override {
    LINGBOT_CHECK(host_in.device() == Device::CPU, "upload: source must be a host tensor");
    Tensor out = alloc(host_in.shape(), dtype);
    if (host_in.numel() == 0) return out;
    if (ctx_->step.active()) {
      // Inside a step the bytes go through its staging: no host wait, and a recording reads
      // only pinned memory.
      Tensor host = host_in.dtype() == dtype || !is_float_elt(dtype) ? host_in.to(dtype)
                                                                     : host_in.to(DType::F32);
      const void* d = ctx_->step.stage(host.raw(), host.nbytes(), s());
      if (host.dtype() == dtype)
        LB_CUDA(cudaMemcpyAsync(out.raw(), d, host.nbytes(), cudaMemcpyDeviceToDevice, s()));
      else
        cuda::convert(d, kF32, out.raw(), elt_of(dtype, "upload"), host.numel(), s());
      return out;
    }
    if (host_in.dtype() == dtype) {
      staged_.copy(out.raw(), host_in.raw(), host_in.nbytes(), s());
      return out;
    }
    if (!is_float_elt(dtype)) {  // integers and bools: convert on the host
      Tensor c = host_in.to(dtype);
      LB_CUDA(cudaMemcpyAsync(out.raw(), c.raw(), c.nbytes(), cudaMemcpyHostToDevice, s()));
      LB_CUDA(cudaStreamSynchronize(s()));  // `c` dies here
      return out;
    }
    Tensor host = is_float_elt(host_in.dtype()) ? host_in : host_in.to(DType::F32);
    void* tmp = ctx_->scratch.get(host.nbytes(), s());
    staged_.copy(tmp, host.raw(), host.nbytes(), s());
    cuda::convert(tmp, elt_of(host.dtype(), "upload source"), out.raw(), elt_of(dtype, "upload"),
                  host.numel(), s());
    if (host.raw() != host_in.raw()) LB_CUDA(cudaStreamSynchronize(s()));  // temporary host copy
    return out;
  }

  Tensor upload_transient(const Tensor& host) override {
    if (!ctx_->step.active()) return upload(host, DType::F32);
    LINGBOT_CHECK(host.device() == Device::CPU && host.dtype() == DType::F32,
                  "upload_transient: source must be a host F32 tensor");
    void* d = ctx_->step.stage(host.raw(), host.nbytes(), s());
    return Tensor::wrap(d, host.shape(), DType::F32, nullptr, Device::CUDA);
  }

  void upload_into(const Tensor& host, Tensor& dst) override {
    LINGBOT_CHECK(
        host.device() == Device::CPU && host.dtype() == DType::F32 && host.numel() == dst.numel(),
        "upload_into: " + shape_str(host.shape()) + " " + dtype_name(host.dtype()) + " into " +
            shape_str(dst.shape()));
    check_float(dst, "upload_into", "destination");
    if (host.numel() == 0) return;
    // A recorded copy reads the host memory when the graph runs, which needs pinned memory;
    // pageable memory (alloc_host's fallback) goes through the step's staging instead.
    cudaPointerAttributes attr{};
    const bool pinned = cudaPointerGetAttributes(&attr, host.raw()) == cudaSuccess &&
                        attr.type == cudaMemoryTypeHost;
    if (!pinned) cudaGetLastError();
    const void* src = host.raw();
    cudaMemcpyKind kind = cudaMemcpyHostToDevice;
    if (!pinned && ctx_->step.active()) {
      src = ctx_->step.stage(host.raw(), host.nbytes(), s());
      kind = cudaMemcpyDeviceToDevice;
    }
    if (dst.dtype() == DType::F32) {
      LB_CUDA(cudaMemcpyAsync(dst.raw(), src, host.nbytes(), kind, s()));
    } else {
      void* tmp = ctx_->scratch.get(host.nbytes(), s());
      LB_CUDA(cudaMemcpyAsync(tmp, src, host.nbytes(), kind, s()));
      cuda::convert(tmp, kF32, dst.raw(), elt_of(dst.dtype(), "upload_into"), host.numel(), s());
    }
    if (!pinned && !ctx_->step.active()) LB_CUDA(cudaStreamSynchronize(s()));
  }

  void begin_step(bool record) override {
    static const bool graphs = [] {
      const char* e = std::getenv("LINGBOT_CUDA_GRAPH");
      return !(e && std::strcmp(e, "0") == 0);
    }();
    ctx_->step.begin(s(), record && graphs);
  }
  void end_step() override { ctx_->step.end(s()); }
  void abort_step() override { ctx_->step.abort(s()); }

  Tensor download(const Tensor& t) override {
    if (t.device() == Device::CPU) return t.dtype() == DType::F32 ? t : t.to(DType::F32);
    no_wait_in_step("download");
    Tensor host = Tensor::zeros(t.shape(), DType::F32);
    if (t.numel() == 0) return host;
    if (t.dtype() == DType::F32) {
      LB_CUDA(cudaMemcpyAsync(host.raw(), t.raw(), t.nbytes(), cudaMemcpyDeviceToHost, s()));
    } else if (is_float_elt(t.dtype())) {
      void* tmp = ctx_->scratch.get(host.nbytes(), s());
      cuda::convert(t.raw(), elt_of(t.dtype(), "download"), tmp, kF32, t.numel(), s());
      LB_CUDA(cudaMemcpyAsync(host.raw(), tmp, host.nbytes(), cudaMemcpyDeviceToHost, s()));
    } else {
      Tensor raw = Tensor::zeros(t.shape(), t.dtype());
      LB_CUDA(cudaMemcpyAsync(raw.raw(), t.raw(), t.nbytes(), cudaMemcpyDeviceToHost, s()));
      LB_CUDA(cudaStreamSynchronize(s()));
      return raw.to(DType::F32);
    }
    LB_CUDA(cudaStreamSynchronize(s()));
    return host;
  }

  void copy(const Tensor& src, Tensor& dst) override {
    LINGBOT_CHECK(src.numel() == dst.numel(),
                  "copy: " + shape_str(src.shape()) + " into " + shape_str(dst.shape()));
    check_dev(src, "copy", "source");
    check_dev(dst, "copy", "destination");
    if (src.dtype() == dst.dtype()) {
      LB_CUDA(cudaMemcpyAsync(dst.raw(), src.raw(), src.nbytes(), cudaMemcpyDeviceToDevice, s()));
      return;
    }
    cuda::convert(src.raw(), elt_of(src.dtype(), "copy source"), dst.raw(),
                  elt_of(dst.dtype(), "copy destination"), src.numel(), s());
  }

  void fill(Tensor& t, float value) override {
    cuda::fill(t.raw(), check_float(t, "fill", "target"), t.numel(), value, s());
  }

  void download_into(const Tensor& t, float* host) override {
    if (t.device() != Device::CUDA || t.dtype() != DType::F32) {
      Backend::download_into(t, host);
      return;
    }
    if (t.numel() == 0) return;
    no_wait_in_step("download_into");
    LB_CUDA(cudaMemcpyAsync(host, t.raw(), t.nbytes(), cudaMemcpyDeviceToHost, s()));
    LB_CUDA(cudaStreamSynchronize(s()));
  }

  Tensor alloc_host(const Shape& shape) override {
    const size_t bytes = static_cast<size_t>(shape_numel(shape)) * sizeof(float);
    void* p = nullptr;
    if (cudaHostAlloc(&p, bytes ? bytes : 4, cudaHostAllocDefault) != cudaSuccess) {
      cudaGetLastError();
      return Tensor::zeros(shape);  // pageable memory still works, without the overlap
    }
    std::memset(p, 0, bytes);
    std::shared_ptr<void> owner(p, [](void* q) { cudaFreeHost(q); });
    return Tensor::wrap(p, shape, DType::F32, std::move(owner));
  }

  void download_async(const Tensor& t, float* host) override {
    check_f32(t, "download_async", "source");
    if (t.numel() == 0) return;
    LB_CUDA(cudaMemcpyAsync(host, t.raw(), t.nbytes(), cudaMemcpyDeviceToHost, s()));
  }

  // Called with the model's step lock held; wait_fence may run on another thread meanwhile.
  uint64_t fence() override {
    const uint64_t n = fences_.load();
    cudaEvent_t& e = ctx_->fences[n % Context::kFences];
    if (!e) LB_CUDA(cudaEventCreateWithFlags(&e, cudaEventDisableTiming));
    LB_CUDA(cudaEventRecord(e, s()));
    fences_.store(n + 1);
    return n + 1;
  }

  void wait_fence(uint64_t id) override {
    if (id == 0) return;
    const uint64_t newest = fences_.load();
    LINGBOT_CHECK(id <= newest, "wait_fence: fence " + std::to_string(id) + " was never issued");
    // One stream runs everything in order, so an event recorded later implies the fence: a
    // fence whose event has been reused (many sequences in flight) waits on a newer one.
    const uint64_t wait = newest - id < Context::kFences - 1 ? id : newest;
    LB_CUDA(cudaEventSynchronize(ctx_->fences[(wait - 1) % Context::kFences]));
  }

  void synchronize() override {
    no_wait_in_step("synchronize");
    LB_CUDA(cudaStreamSynchronize(s()));
  }
  void allow_fast_convolutions(bool on) override { fast_convs_ = on; }
  size_t device_memory_used() const override {
    size_t free = 0, total = 0;
    if (cudaMemGetInfo(&free, &total) != cudaSuccess) return 0;
    return total - free;
  }
  size_t device_memory_free() const override {
    size_t free = 0, total = 0;
    return cudaMemGetInfo(&free, &total) == cudaSuccess ? free : 0;
  }

  void linear(const Tensor& x, const Tensor& w, const Tensor* b, Tensor& y, Act act) override {
    const Elt wt = check_float(w, "linear", "weight");
    const Elt xt = check_float(x, "linear", "input");
    const Elt yt = check_float(y, "linear", "output");
    LINGBOT_CHECK(w.rank() == 2, where("linear weight", w));
    const int64_t k = w.dim(1), n = w.dim(0), m = k ? x.numel() / k : 0;
    LINGBOT_CHECK(x.numel() == m * k && y.numel() == m * n,
                  "linear: input " + shape_str(x.shape()) + ", weight " + shape_str(w.shape()) +
                      ", output " + shape_str(y.shape()));
    Elt bt = kF32;
    if (b) {
      bt = check_float(*b, "linear", "bias");
      LINGBOT_CHECK(b->numel() == n, where("linear bias", *b));
    }
    if (m == 0) return;

    // An fp32 weight gives an fp32 product (cuBLASLt has no fp32 x fp32 -> bf16 kernels); a
    // mismatched input is converted to the weight's dtype first. cuBLASLt fuses the bias only
    // when it has the output's dtype (measured on H200: an f32 bias on a bf16 output is declined,
    // and the unfused bias pass costs as much as the GEMM at M = 978), so a mismatched bias is
    // converted too; rounding it to bf16 is what autocast does in the reference.
    const bool convert_x = xt != wt;
    const Elt dt = wt == kF32 ? kF32 : yt;
    const bool temp_y = dt != yt;
    const bool convert_b = b && bt != dt;
    const size_t esize = dt == kF32 ? 4 : 2;
    const size_t xbytes = convert_x ? round_up(x.numel() * (wt == kF32 ? 4 : 2)) : 0;
    const size_t ybytes = temp_y ? round_up(y.numel() * 4) : 0;
    const size_t bbytes = convert_b ? round_up(n * esize) : 0;
    char* tmp = (xbytes + ybytes + bbytes)
                    ? static_cast<char*>(ctx_->scratch.get(xbytes + ybytes + bbytes, s()))
                    : nullptr;
    const void* xp = x.raw();
    if (convert_x) {
      cuda::convert(x.raw(), xt, tmp, wt, x.numel(), s());
      xp = tmp;
    }
    void* dp = temp_y ? tmp + xbytes : y.raw();
    const void* bp = b ? b->raw() : nullptr;
    if (convert_b) {
      cuda::convert(b->raw(), bt, tmp + xbytes + ybytes, dt, n, s());
      bp = tmp + xbytes + ybytes;
      bt = dt;
    }

    GemmArgs g;
    g.trans_a = true;  // row-major y = x . w^T is column-major y^T = w^T(op) . x^T
    g.m = n;
    g.n = m;
    g.k = k;
    g.a = w.raw();
    g.lda = k;
    g.b = xp;
    g.ldb = k;
    g.d = dp;
    g.ldd = n;
    g.ab_t = wt;
    g.d_t = dt;
    g.bias = bp;
    g.bias_t = bt;
    g.relu = act == Act::ReLU;
    // cuBLASLt's GELU epilogue is the tanh approximation (up to 4.7e-4 off the erf form the
    // model uses), so GELU and SiLU run as a separate pass on the product.
    const bool fused = gemm(*ctx_, g);
    if (!fused) {
      cuda::bias_act(dp, dt, g.bias, bt, m, n, act, s());
    } else if (act == Act::GELU || act == Act::SiLU) {
      cuda::bias_act(dp, dt, nullptr, bt, m, n, act, s());
    }
    if (temp_y) cuda::convert(dp, dt, y.raw(), yt, y.numel(), s());
  }

  void layer_norm(const Tensor& x, const Tensor* w, const Tensor* b, float eps,
                  Tensor& y) override {
    const Elt xt = check_float(x, "layer_norm", "input");
    const Elt yt = check_float(y, "layer_norm", "output");
    const int64_t n = x.dim(-1), rows = n ? x.numel() / n : 0;
    LINGBOT_CHECK(y.numel() == x.numel(),
                  "layer_norm: " + shape_str(x.shape()) + " into " + shape_str(y.shape()));
    Elt wt = kF32, bt = kF32;
    if (w) {
      wt = check_float(*w, "layer_norm", "weight");
      LINGBOT_CHECK(w->numel() == n, where("layer_norm weight", *w));
    }
    if (b) {
      bt = check_float(*b, "layer_norm", "bias");
      LINGBOT_CHECK(b->numel() == n, where("layer_norm bias", *b));
    }
    cuda::layer_norm(x.raw(), xt, w ? w->raw() : nullptr, wt, b ? b->raw() : nullptr, bt, eps,
                     y.raw(), yt, rows, n, s());
  }

  void add(Tensor& x, const Tensor& y, const Tensor* gamma, float alpha) override {
    const Elt xt = check_float(x, "add", "target");
    const Elt yt = check_float(y, "add", "operand");
    const int64_t n = x.numel(), ny = y.numel(), c = x.dim(-1);
    LINGBOT_CHECK(ny > 0 && n % ny == 0, "add: cannot broadcast " + shape_str(y.shape()) +
                                             " onto " + shape_str(x.shape()));
    Elt gt = kF32;
    if (gamma) {
      gt = check_float(*gamma, "add", "gamma");
      LINGBOT_CHECK(gamma->numel() == c, where("add gamma", *gamma));
    }
    cuda::add(x.raw(), xt, y.raw(), yt, n, ny, gamma ? gamma->raw() : nullptr, gt, c, alpha, s());
  }

  void activate(Tensor& x, Act act) override {
    const Elt t = check_float(x, "activate", "tensor");
    cuda::bias_act(x.raw(), t, nullptr, kF32, 1, x.numel(), act, s());
  }

  void concat_last(const Tensor& a, const Tensor& b, Tensor& y) override {
    check_dev(a, "concat_last", "a");
    check_dev(b, "concat_last", "b");
    check_dev(y, "concat_last", "output");
    LINGBOT_CHECK(a.dtype() == b.dtype() && a.dtype() == y.dtype(),
                  "concat_last: operands and output must share a dtype");
    const int64_t ca = a.dim(-1), cb = b.dim(-1), m = ca ? a.numel() / ca : 0;
    LINGBOT_CHECK(cb && b.numel() / cb == m && y.numel() == m * (ca + cb),
                  "concat_last: shape mismatch");
    cuda::concat_last(a.raw(), b.raw(), y.raw(), m, ca, cb, dtype_size(a.dtype()), s());
  }

  void transpose_last2(const Tensor& x, Tensor& y) override {
    check_dev(x, "transpose_last2", "input");
    check_dev(y, "transpose_last2", "output");
    LINGBOT_CHECK(x.dtype() == y.dtype(), "transpose_last2: dtype mismatch");
    const int64_t c = x.dim(-1), r = x.dim(-2), batch = r * c != 0 ? x.numel() / (r * c) : 0;
    LINGBOT_CHECK(y.numel() == x.numel(), "transpose_last2: shape mismatch");
    cuda::transpose_last2(x.raw(), y.raw(), batch, r, c, dtype_size(x.dtype()), s());
  }

  void split_qkv(const Tensor& qkv, const QKNorm* norm, const Rope* rope, Tensor& q, Tensor& k,
                 Tensor& v) override {
    SplitQkvArgs a;
    a.qkv_t = check_float(qkv, "split_qkv", "qkv");
    a.out_t = check_float(q, "split_qkv", "q");
    LINGBOT_CHECK(
        check_float(k, "split_qkv", "k") == a.out_t && check_float(v, "split_qkv", "v") == a.out_t,
        "split_qkv: q, k and v must share a dtype");
    a.heads = static_cast<int>(q.dim(-2));
    a.dim = static_cast<int>(q.dim(-1));
    a.rows = q.numel() / (int64_t(a.heads) * a.dim);
    LINGBOT_CHECK(
        qkv.numel() == a.rows * 3 * a.heads * a.dim && k.numel() == q.numel() &&
            v.numel() == q.numel(),
        "split_qkv: qkv " + shape_str(qkv.shape()) + " does not match q " + shape_str(q.shape()));
    a.qkv = qkv.raw();
    a.q = q.raw();
    a.k = k.raw();
    a.v = v.raw();
    if (norm) {
      a.norm = true;
      a.eps = norm->eps;
      auto param = [&](const Tensor* t, const void*& p, Elt& e, const char* what) {
        if (!t) return;
        e = check_float(*t, "split_qkv", what);
        LINGBOT_CHECK(t->numel() == a.dim, where("split_qkv norm parameter", *t));
        p = t->raw();
      };
      param(norm->q_weight, a.qw, a.qw_t, "q_norm weight");
      param(norm->q_bias, a.qb, a.qb_t, "q_norm bias");
      param(norm->k_weight, a.kw, a.kw_t, "k_norm weight");
      param(norm->k_bias, a.kb, a.kb_t, "k_norm bias");
    }
    if (rope) {
      check_f32(rope->cos, "split_qkv", "rope cos");
      check_f32(rope->sin, "split_qkv", "rope sin");
      LINGBOT_CHECK(
          rope->cos.numel() >= a.rows * (a.dim / 2) && rope->sin.numel() == rope->cos.numel(),
          "split_qkv: rope tables " + shape_str(rope->cos.shape()) + " do not cover " +
              std::to_string(a.rows) + " rows");
      a.cos = rope->cos.f32();
      a.sin = rope->sin.f32();
      a.interleaved = rope->pairs == RopePairs::Interleaved;
    }
    cuda::split_qkv(a, s());
  }

  void attention(const Tensor& q, const std::vector<KVSegment>& kv, float scale,
                 Tensor& out) override {
    AttentionArgs a;
    a.qkv_t = check_float(q, "attention", "query");
    a.out_t = check_float(out, "attention", "output");
    a.heads = static_cast<int>(q.dim(-2));
    a.dim = static_cast<int>(q.dim(-1));
    const int64_t nq = q.numel() / (int64_t(a.heads) * a.dim);
    LINGBOT_CHECK(nq <= 0x7fffffff / 2, "attention: too many queries");
    LINGBOT_CHECK(out.numel() == q.numel(),
                  "attention: output " + shape_str(out.shape()) + " for q " + shape_str(q.shape()));
    a.nq = static_cast<int>(nq);
    a.q = q.raw();
    a.out = out.raw();
    a.scale = scale;
    a.segments = &kv;
    cuda::attention(*ctx_, a);
  }

  void store_kv(const Tensor& k, const Tensor& v, void* k_dst, void* v_dst, DType dtype) override {
    const Elt kt = check_float(k, "store_kv", "k");
    const Elt vt = check_float(v, "store_kv", "v");
    const Elt dt = elt_of(dtype, "store_kv storage");
    LINGBOT_CHECK(k.numel() == v.numel(), "store_kv: k and v differ in size");
    cuda::convert(k.raw(), kt, k_dst, dt, k.numel(), s());
    cuda::convert(v.raw(), vt, v_dst, dt, v.numel(), s());
  }

  void patchify(const Tensor& img, int p, Tensor& rows) override {
    const Elt it = check_float(img, "patchify", "input");
    const Elt rt = check_float(rows, "patchify", "output");
    LINGBOT_CHECK(img.rank() == 4 && p > 0, where("patchify input", img));
    const int64_t sn = img.dim(0), c = img.dim(1), h = img.dim(2), w = img.dim(3);
    LINGBOT_CHECK(rows.numel() == sn * (h / p) * (w / p) * c * p * p,
                  "patchify: output shape mismatch");
    cuda::patchify(img.raw(), it, rows.raw(), rt, sn, c, h, w, p, s());
  }

  void conv2d(const Tensor& x, const Tensor& w, const Tensor* b, int stride, int pad,
              Tensor& y) override {
    check_f32(x, "conv2d", "input");
    check_f32(w, "conv2d", "weight");
    check_f32(y, "conv2d", "output");
    if (b) check_f32(*b, "conv2d", "bias");
    const int64_t n = x.dim(0), ci = x.dim(1), hi = x.dim(2), wi = x.dim(3);
    const int64_t co = w.dim(0), kh = w.dim(2), kw = w.dim(3);
    const int64_t ho = y.dim(2), wo = y.dim(3);
    LINGBOT_CHECK(w.dim(1) == ci && y.dim(0) == n && y.dim(1) == co &&
                      ho == (hi + 2 * pad - kh) / stride + 1 &&
                      wo == (wi + 2 * pad - kw) / stride + 1,
                  "conv2d: input " + shape_str(x.shape()) + ", weight " + shape_str(w.shape()) +
                      ", output " + shape_str(y.shape()));
    const int64_t kdim = ci * kh * kw, npix = ho * wo;
    const bool pointwise = kh == 1 && kw == 1 && stride == 1 && pad == 0;
    if (fast_convs_ && !pointwise && cuda::conv_supported(ci, kh, kw) && conv_impl_gemm() == 0) {
      cuda::ConvArgs a;
      a.x = x.f32();
      a.bias = b ? b->f32() : nullptr;
      a.y = y.f32();
      a.ci = static_cast<int>(ci);
      a.hi = static_cast<int>(hi);
      a.wi = static_cast<int>(wi);
      a.co = static_cast<int>(co);
      a.ho = static_cast<int>(ho);
      a.wo = static_cast<int>(wo);
      a.kh = static_cast<int>(kh);
      a.kw = static_cast<int>(kw);
      a.stride = stride;
      a.pad = pad;
      void* packed = ctx_->scratch.get(cuda::conv_packed_bytes(co, ci, kh, kw), s());
      cuda::conv2d_bf16(a, w.f32(), packed, static_cast<int>(n), s());
      return;
    }
    // im2col in pixel chunks so the column buffer stays bounded (~256 MB) at any resolution.
    const int64_t chunk =
        pointwise ? npix : std::max<int64_t>(1, std::min<int64_t>(npix, (64LL << 20) / kdim));
    float* cols =
        pointwise ? nullptr : static_cast<float*>(ctx_->scratch.get(kdim * chunk * 4, s()));
    for (int64_t img = 0; img < n; ++img) {
      const float* xp = x.f32() + img * ci * hi * wi;
      float* yp = y.f32() + img * co * npix;
      for (int64_t p0 = 0; p0 < npix; p0 += chunk) {
        const int64_t p1 = std::min(npix, p0 + chunk);
        const float* a = xp;
        int64_t lda = npix;
        if (!pointwise) {
          cuda::im2col(xp, cols, ci, hi, wi, kh, kw, stride, pad, wo, p0, p1, s());
          a = cols;
          lda = p1 - p0;
        }
        // Row-major y[co, pix] is column-major (pix x co) = cols^T(pix x kdim) . w^T(kdim x co).
        GemmArgs g;
        g.m = p1 - p0;
        g.n = co;
        g.k = kdim;
        g.a = a;
        g.lda = lda;
        g.b = w.raw();
        g.ldb = kdim;
        g.d = yp + p0;
        g.ldd = npix;
        g.tf32 = fast_convs_;
        gemm(*ctx_, g);
      }
    }
    if (b) cuda::add_channel_bias(y.f32(), b->f32(), n, co, npix, s());
  }

  void conv_transpose2d(const Tensor& x, const Tensor& w, const Tensor* b, int stride,
                        Tensor& y) override {
    check_f32(x, "conv_transpose2d", "input");
    check_f32(w, "conv_transpose2d", "weight");
    check_f32(y, "conv_transpose2d", "output");
    if (b) check_f32(*b, "conv_transpose2d", "bias");
    const int64_t n = x.dim(0), ci = x.dim(1), hi = x.dim(2), wi = x.dim(3);
    const int64_t co = w.dim(1), k = w.dim(2);
    LINGBOT_CHECK(k == stride && w.dim(3) == k && w.dim(0) == ci && y.dim(1) == co &&
                      y.dim(2) == hi * k && y.dim(3) == wi * k,
                  "conv_transpose2d: kernel must equal stride; input " + shape_str(x.shape()) +
                      ", weight " + shape_str(w.shape()) + ", output " + shape_str(y.shape()));
    const int64_t npix = hi * wi, rows = co * k * k;
    float* tmp = static_cast<float*>(ctx_->scratch.get(rows * npix * 4, s()));
    for (int64_t img = 0; img < n; ++img) {
      // tmp[rows, pix] row-major = column-major (pix x rows) = x^T(pix x ci) . w(ci x rows).
      GemmArgs g;
      g.trans_b = true;
      g.m = npix;
      g.n = rows;
      g.k = ci;
      g.a = x.f32() + img * ci * npix;
      g.lda = npix;
      g.b = w.raw();
      g.ldb = rows;
      g.d = tmp;
      g.ldd = npix;
      g.tf32 = fast_convs_;
      gemm(*ctx_, g);
      cuda::scatter_transpose_conv(tmp, b ? b->f32() : nullptr, y.f32() + img * co * npix * k * k,
                                   co, static_cast<int>(k), hi, wi, s());
    }
  }

  void upsample_bilinear(const Tensor& x, Tensor& y) override {
    check_f32(x, "upsample_bilinear", "input");
    check_f32(y, "upsample_bilinear", "output");
    const int64_t nc = x.dim(0) * x.dim(1);
    LINGBOT_CHECK(y.dim(0) * y.dim(1) == nc, "upsample_bilinear: channel mismatch");
    cuda::upsample_bilinear(x.f32(), y.f32(), nc, x.dim(2), x.dim(3), y.dim(2), y.dim(3), s());
  }

 private:
  cudaStream_t s() const { return ctx_->stream; }
  void no_wait_in_step(const char* op) const {
    LINGBOT_CHECK(!ctx_->step.capturing(),
                  std::string("cuda backend: ") + op + " inside a recorded step (a bug)");
  }
  std::shared_ptr<Context> ctx_;
  StagedUpload staged_;  // weights' host-to-device copies (declared after ctx_: freed first)
  // LINGBOT_CONV_IMPL=gemm keeps im2col + GEMM (TF32) for every convolution, for comparison.
  static int conv_impl_gemm() {
    static const int v = [] {
      const char* e = std::getenv("LINGBOT_CONV_IMPL");
      return e && std::strcmp(e, "gemm") == 0 ? 1 : 0;
    }();
    return v;
  }
  bool fast_convs_ = false;
  std::atomic<uint64_t> fences_{0};
};

std::shared_ptr<Context> make_context(int device) {
  auto ctx = std::make_shared<Context>();
  ctx->device = device;
  LB_CUDA(cudaSetDevice(device));
  LB_CUDA(cudaGetDeviceProperties(&ctx->prop, device));
  LB_CUDA(cudaStreamCreateWithFlags(&ctx->owner.stream, cudaStreamNonBlocking));
  ctx->stream = ctx->owner.stream;
  cudaMemPool_t pool = nullptr;
  LB_CUDA(cudaDeviceGetDefaultMemPool(&pool, device));
  uint64_t keep = UINT64_MAX;
  LB_CUDA(cudaMemPoolSetAttribute(pool, cudaMemPoolAttrReleaseThreshold, &keep));
  // The side stream that allocates while a step is recorded may reuse a block freed on the main
  // stream only once that free has run, never by making itself wait on the (capturing) stream.
  int no = 0;
  LB_CUDA(cudaMemPoolSetAttribute(pool, cudaMemPoolReuseAllowInternalDependencies, &no));
  LB_CUDA(cudaStreamCreateWithFlags(&ctx->alloc_stream, cudaStreamNonBlocking));
  LB_CUBLAS(cublasLtCreate(&ctx->lt));
  LB_CUBLAS(cublasCreate(&ctx->blas));
  LB_CUBLAS(cublasSetMathMode(ctx->blas, CUBLAS_PEDANTIC_MATH));
  ctx->lt_workspace_bytes = 32u << 20;
  LB_CUDA(cudaMallocAsync(&ctx->lt_workspace, ctx->lt_workspace_bytes, ctx->stream));
  // Classic cuBLAS gets the same workspace (its calls and cuBLASLt's run in one stream, one after
  // the other), so that it never allocates one itself inside a recorded step. Setting the stream
  // resets the workspace, hence this order, once.
  LB_CUBLAS(cublasSetStream(ctx->blas, ctx->stream));
  LB_CUBLAS(cublasSetWorkspace(ctx->blas, ctx->lt_workspace, ctx->lt_workspace_bytes));
  return ctx;
}

}  // namespace
}  // namespace cuda

std::unique_ptr<Backend> make_cuda_backend(std::string* why) {
  int count = 0;
  const cudaError_t e = cudaGetDeviceCount(&count);
  if (e != cudaSuccess || count == 0) {
    if (e != cudaSuccess) cudaGetLastError();
    if (why)
      *why = std::string("no usable CUDA device: ") +
             (e != cudaSuccess ? cudaGetErrorString(e) : "the driver reports none");
    return nullptr;
  }
  try {
    cudaDeviceProp prop{};
    if (cudaGetDeviceProperties(&prop, 0) != cudaSuccess || prop.major < 8) {
      if (why)
        *why = std::string("CUDA device 0 (") + prop.name + ") is below sm_80, which the bf16 " +
               "tensor-core kernels need";
      return nullptr;
    }
    return std::make_unique<cuda::CudaBackend>(cuda::make_context(0));
  } catch (const std::exception& ex) {
    if (why) *why = ex.what();
    return nullptr;
  }
}

}  // namespace lingbot
