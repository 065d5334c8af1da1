// The CUDA backend: queues work on one stream (Backend has checked the operands). Every op is
// asynchronous except download (and synchronize); errors from a kernel surface at the next launch
// check or at the next synchronising call.
//
// Dtypes: F32 everywhere for the float32 mode; BF16 (and F16 where it costs nothing) for the
// tensors that matter for speed. attention() takes K/V in the same dtype as q: the KV cache is
// stored (store_kv) in the activation dtype that the q/k/v projections produce.
#include <algorithm>
#include <atomic>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <map>
#include <mutex>

#include "backend/cuda/common.h"
#include "backend/cuda/staged_upload.h"
#include "backend/scratch.h"

namespace lingbot {
namespace cuda {
namespace {

size_t round_up(size_t v) {
  return (v + 255) / 256 * 256;
}

class CudaBackend final : public Backend {
 public:
  explicit CudaBackend(std::shared_ptr<Context> ctx) : ctx_(std::move(ctx)) {
    if (!ctx_->hopper) hold_plain_launches(ctx_->device, 1);
  }
  ~CudaBackend() override {
    if (!ctx_->hopper) hold_plain_launches(ctx_->device, -1);
    use_on_this_thread();
    try {
      if (ctx_->on_side) end_side();
      join_side();
    } catch (...) {
    }
    ctx_->step.abort(ctx_->stream);
    // Kernels still queued may read tensors the caller is about to free; let them finish.
    cudaStreamSynchronize(ctx_->stream);
    if (verbose_level() >= 1) {
      const auto& c = ctx_->step.counters();
      std::fprintf(stderr,
                   "[lingbot cuda] steps recorded %lld: graph updated %lld, instantiated %lld; "
                   "allocations while recording %lld\n",
                   static_cast<long long>(c.recorded), static_cast<long long>(c.updated),
                   static_cast<long long>(c.instantiated), static_cast<long long>(c.allocations));
      // Where the peak went: the context and libraries, and the stream-ordered pool (reserved
      // from the driver against handed out to tensors; the difference is the pool's slack).
      cudaMemPool_t pool = nullptr;
      uint64_t reserved = 0, used = 0;
      if (cudaDeviceGetDefaultMemPool(&pool, ctx_->device) == cudaSuccess) {
        cudaMemPoolGetAttribute(pool, cudaMemPoolAttrReservedMemHigh, &reserved);
        cudaMemPoolGetAttribute(pool, cudaMemPoolAttrUsedMemHigh, &used);
      }
      std::fprintf(stderr,
                   "[lingbot cuda] memory: context and libraries %.3f GB; pool reserved at most "
                   "%.3f GB, in use at most %.3f GB\n",
                   ctx_->context_bytes / 1e9, reserved / 1e9, used / 1e9);
    }
  }

  Device device() const override { return Device::CUDA; }
  bool handles(DType t) const override { return is_float_elt(t); }
  std::string name() const override {
    // The portable path on a Hopper GPU says so (tests and reports tell the two apart by it).
    return std::string("cuda (") + ctx_->prop.name + ", sm_" + std::to_string(ctx_->prop.major) +
           std::to_string(ctx_->prop.minor) +
           (!ctx_->hopper && runs_sm90a(ctx_->prop) ? ", portable path)" : ")");
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

  void do_upload_into(const Tensor& host, Tensor& dst) override {
    if (host.numel() == 0) return;
    // Inside a step the bytes go through its staging, which a recorded step uploads before its
    // graph runs, beside the step before (the frame: ~2 MB that would otherwise cross with the
    // device idle); pinned memory outside a recording is copied as it is.
    cudaPointerAttributes attr{};
    const bool pinned = cudaPointerGetAttributes(&attr, host.raw()) == cudaSuccess &&
                        attr.type == cudaMemoryTypeHost;
    if (!pinned) cudaGetLastError();
    const void* src = host.raw();
    cudaMemcpyKind kind = cudaMemcpyHostToDevice;
    if (ctx_->step.active() && (!pinned || ctx_->step.capturing())) {
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

  void begin_step(bool record) override { ctx_->step.begin(s(), record && switches().cuda_graph); }
  void end_step() override {
    LINGBOT_CHECK(!ctx_->on_side, "end_step: the side queue is still current (no end_side)");
    join_side();
    ctx_->step.end(s());
  }
  void abort_step() override {
    if (ctx_->on_side) end_side();
    join_side();  // a recording must end with the side queue joined
    ctx_->step.abort(s());
  }

  void begin_side() override {
    Context& c = *ctx_;
    LINGBOT_CHECK(!c.on_side, "begin_side: the side queue is current already");
    if (!c.side_stream) {
      // The side queue gets the higher priority: its chain is the short, launch-bound one
      // (the camera head's small kernels), whose blocks should not wait behind a long grid.
      int least = 0, greatest = 0;
      LB_CUDA(cudaDeviceGetStreamPriorityRange(&least, &greatest));
      LB_CUDA(cudaStreamCreateWithPriority(&c.side_stream, cudaStreamNonBlocking, greatest));
      LB_CUDA(cudaEventCreateWithFlags(&c.fork_event, cudaEventDisableTiming));
      LB_CUDA(cudaEventCreateWithFlags(&c.join_event, cudaEventDisableTiming));
      c.side_lt_workspace = cuda::device_malloc(c, c.side_lt_workspace_bytes);
    }
    LB_CUDA(cudaEventRecord(c.fork_event, c.stream));
    LB_CUDA(cudaStreamWaitEvent(c.side_stream, c.fork_event, 0));
    switch_queue(true);
  }
  void end_side() override {
    Context& c = *ctx_;
    LINGBOT_CHECK(c.on_side, "end_side without begin_side");
    LB_CUDA(cudaEventRecord(c.join_event, c.stream));
    switch_queue(false);
    c.side_pending = true;
  }
  void join_side() override {
    Context& c = *ctx_;
    LINGBOT_CHECK(!c.on_side, "join_side: the side queue is still current (no end_side)");
    if (!c.side_pending) return;
    LB_CUDA(cudaStreamWaitEvent(c.stream, c.join_event, 0));
    c.side_pending = false;
  }
  void switch_queue(bool side) {
    Context& c = *ctx_;
    c.stream = side ? c.side_stream : c.owner.stream;
    std::swap(c.scratch, c.side_scratch);
    std::swap(c.lt_workspace, c.side_lt_workspace);
    std::swap(c.lt_workspace_bytes, c.side_lt_workspace_bytes);
    // Classic cuBLAS (the GEMM fallback) keeps a stream; setting it resets its workspace.
    LB_CUBLAS(cublasSetStream(c.blas, c.stream));
    LB_CUBLAS(cublasSetWorkspace(c.blas, c.lt_workspace, c.lt_workspace_bytes));
    c.on_side = side;
  }

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

  void do_copy(const Tensor& src, Tensor& dst) override {
    if (src.dtype() == dst.dtype()) {
      LB_CUDA(cudaMemcpyAsync(dst.raw(), src.raw(), src.nbytes(), cudaMemcpyDeviceToDevice, s()));
      return;
    }
    cuda::convert(src.raw(), elt_of(src.dtype(), "copy source"), dst.raw(),
                  elt_of(dst.dtype(), "copy destination"), src.numel(), s());
  }

  void do_fill(Tensor& t, float value) override {
    cuda::fill(t.raw(), elt_of(t.dtype(), "fill"), t.numel(), value, s());
  }

  void do_copy_ranges(const std::vector<ByteRange>& ranges) override {
    cuda::copy_ranges(ranges.data(), ranges.size(), s());
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

  void read_bytes(const void* src, void* host, size_t bytes) override {
    if (!bytes) return;
    synchronize();  // both queues: the bytes may have been written by either
    LB_CUDA(cudaMemcpy(host, src, bytes, cudaMemcpyDeviceToHost));
  }

  void write_bytes(const void* host, void* dst, size_t bytes) override {
    if (!bytes) return;
    // Synchronous: `host` may be a file mapping or a buffer reused at once.
    synchronize();
    LB_CUDA(cudaMemcpy(dst, host, bytes, cudaMemcpyHostToDevice));
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

  void do_download_async(const Tensor& t, float* host) override {
    if (t.numel() == 0) return;
    LB_CUDA(cudaMemcpyAsync(host, t.raw(), t.nbytes(), cudaMemcpyDeviceToHost, s()));
  }

  bool queues_work() const override { return true; }
  // Called with the model's step lock held; wait_fence may run on another thread meanwhile.
  uint64_t fence() override {
    LINGBOT_CHECK(!ctx_->on_side, "fence: the side queue is still current (no end_side)");
    join_side();
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
    LINGBOT_CHECK(!ctx_->on_side, "synchronize: the side queue is still current (no end_side)");
    join_side();
    LB_CUDA(cudaStreamSynchronize(s()));
  }
  void allow_fast_convolutions(bool on) override { fast_convs_ = on; }
  // The CUDA runtime works on the calling thread's current device: every thread that queues work
  // for this backend (a session pushed from its own thread) makes its device current first.
  void use_on_this_thread() const override {
    int current = -1;
    if (cudaGetDevice(&current) != cudaSuccess || current != ctx_->device)
      LB_CUDA(cudaSetDevice(ctx_->device));
  }
  size_t device_memory_used() const override {
    use_on_this_thread();
    size_t free = 0, total = 0;
    if (cudaMemGetInfo(&free, &total) != cudaSuccess) return 0;
    return total - free;
  }
  size_t device_memory_free() const override {
    use_on_this_thread();
    size_t free = 0, total = 0;
    return cudaMemGetInfo(&free, &total) == cudaSuccess ? free : 0;
  }
  bool reads_fp8_kv() const override { return true; }

  void do_linear(const Tensor& x, const Tensor& w, const Tensor* b, Tensor& y, Act act) override {
    matmul(x, w, b, y, act, false);
  }
  void do_linear_add(const Tensor& x, const Tensor& w, const Tensor* b, Tensor& y) override {
    matmul(x, w, b, y, Act::None, true);
  }

  // A few F32 rows into bf16 weights: the GEMV normalizes them itself, one launch instead of two.
  void do_layer_norm_linear(const Tensor& x, const Tensor* norm_w, const Tensor* norm_b, float eps,
                            Tensor& normed, const Tensor& w, const Tensor* b, Tensor& y,
                            Act act) override {
    const int64_t k = w.dim(1), n = w.dim(0), m = x.numel() / k;
    cuda::RowNorm rn;
    rn.w = norm_w ? norm_w->raw() : nullptr;
    rn.wt = norm_w ? elt_of(norm_w->dtype(), "layer_norm weight") : kF32;
    rn.b = norm_b ? norm_b->raw() : nullptr;
    rn.bt = norm_b ? elt_of(norm_b->dtype(), "layer_norm bias") : kF32;
    rn.eps = eps;
    const Elt bt = b ? elt_of(b->dtype(), "linear bias") : kF32;
    // gemv declines (queuing nothing) every case but F32 rows into bf16 weights it can take.
    if (cuda::gemv(x.raw(), elt_of(x.dtype(), "linear input"), w.raw(),
                   elt_of(w.dtype(), "linear weight"), b ? b->raw() : nullptr, bt, y.raw(),
                   elt_of(y.dtype(), "linear output"), m, n, k, act, false, s(), &rn))
      return;
    Backend::do_layer_norm_linear(x, norm_w, norm_b, eps, normed, w, b, y, act);
  }

  void do_layer_norm(const Tensor& x, const Tensor* w, const Tensor* b, float eps,
                     Tensor& y) override {
    const Elt xt = elt_of(x.dtype(), "layer_norm input");
    const Elt yt = elt_of(y.dtype(), "layer_norm output");
    const int64_t n = x.dim(-1), rows = n ? x.numel() / n : 0;
    const Elt wt = w ? elt_of(w->dtype(), "layer_norm weight") : kF32;
    const Elt bt = b ? elt_of(b->dtype(), "layer_norm bias") : kF32;
    cuda::layer_norm(x.raw(), xt, w ? w->raw() : nullptr, wt, b ? b->raw() : nullptr, bt, eps,
                     y.raw(), yt, rows, n, s());
  }

  void do_add(Tensor& x, const Tensor& y, const Tensor* gamma, float alpha) override {
    const Elt xt = elt_of(x.dtype(), "add target");
    const Elt yt = elt_of(y.dtype(), "add operand");
    const int64_t n = x.numel(), ny = y.numel(), c = x.dim(-1);
    const Elt gt = gamma ? elt_of(gamma->dtype(), "add gamma") : kF32;
    cuda::add(x.raw(), xt, y.raw(), yt, n, ny, gamma ? gamma->raw() : nullptr, gt, c, alpha, s());
  }

  void do_activate(Tensor& x, Act act) override {
    const Elt t = elt_of(x.dtype(), "activate");
    cuda::bias_act(x.raw(), t, nullptr, kF32, 1, x.numel(), act, s());
  }

  void do_concat_last(const Tensor& a, const Tensor& b, Tensor& y) override {
    const int64_t ca = a.dim(-1), cb = b.dim(-1), m = a.numel() / ca;
    cuda::concat_last(a.raw(), b.raw(), y.raw(), m, ca, cb, dtype_size(a.dtype()), s());
  }

  void do_transpose_last2(const Tensor& x, Tensor& y) override {
    const int64_t c = x.dim(-1), r = x.dim(-2), batch = r * c != 0 ? x.numel() / (r * c) : 0;
    cuda::transpose_last2(x.raw(), y.raw(), batch, r, c, dtype_size(x.dtype()), s());
  }

  void do_split_qkv(const Tensor& qkv, const QKNorm* norm, const Rope* rope, Tensor& q, Tensor& k,
                    Tensor& v) override {
    cuda::split_qkv(split_args(qkv, norm, rope, q, k, v), s());
  }

  // One pass instead of the split and a store per frame: K and V are written once, in the
  // cache's dtype, and never read back.
  void do_split_qkv_into(const Tensor& qkv, const QKNorm* norm, const Rope* rope, Tensor& q,
                         Tensor& k, Tensor& v, const KVDestination& into) override {
    SplitQkvArgs a = split_args(qkv, norm, rope, q, k, v);
    const bool f8 = into.dtype == DType::F8E4M3;
    if ((f8 || into.dtype == q.dtype()) &&
        into.frames.size() <= static_cast<size_t>(SplitQkvArgs::kMaxDirectFrames)) {
      a.direct_frames = static_cast<int>(into.frames.size());
      a.rows_per_frame = into.rows_per_frame;
      a.direct_f8 = f8;
      for (int f = 0; f < a.direct_frames; ++f) {
        a.kd[f] = into.frames[f].k;
        a.vd[f] = into.frames[f].v;
        a.ds[f] = f8 ? into.frames[f].scales->f32() : nullptr;
      }
      if (cuda::split_qkv_direct_ok(a)) {
        cuda::split_qkv(a, s());
        return;
      }
    }
    Backend::do_split_qkv_into(qkv, norm, rope, q, k, v, into);
  }

  SplitQkvArgs split_args(const Tensor& qkv, const QKNorm* norm, const Rope* rope, Tensor& q,
                          Tensor& k, Tensor& v) {
    SplitQkvArgs a;
    a.qkv_t = elt_of(qkv.dtype(), "split_qkv qkv");
    a.out_t = elt_of(q.dtype(), "split_qkv q");
    a.heads = static_cast<int>(q.dim(-2));
    a.dim = static_cast<int>(q.dim(-1));
    a.rows = q.numel() / (int64_t(a.heads) * a.dim);
    a.qkv = qkv.raw();
    a.q = q.raw();
    a.k = k.raw();
    a.v = v.raw();
    if (norm) {
      a.norm = true;
      a.eps = norm->eps;
      auto param = [&](const Tensor* t, const void*& p, Elt& e, const char* what) {
        if (!t) return;
        e = elt_of(t->dtype(), what);
        p = t->raw();
      };
      param(norm->q_weight, a.qw, a.qw_t, "q_norm weight");
      param(norm->q_bias, a.qb, a.qb_t, "q_norm bias");
      param(norm->k_weight, a.kw, a.kw_t, "k_norm weight");
      param(norm->k_bias, a.kb, a.kb_t, "k_norm bias");
    }
    if (rope) {
      a.cos = rope->cos.f32();
      a.sin = rope->sin.f32();
      a.interleaved = rope->pairs == RopePairs::Interleaved;
    }
    return a;
  }

  void do_attention(const Tensor& q, const std::vector<KVSegment>& kv, float scale,
                    Tensor& out) override {
    std::vector<KeyTable> tables;
    stage_tables({&kv}, tables, false);
    run_attention(q, tables[0], scale, out);
  }

  void do_plan_attention(const std::vector<std::vector<KVSegment>>& lists) override {
    std::vector<const std::vector<KVSegment>*> ptrs;
    for (const auto& l : lists) ptrs.push_back(&l);
    stage_tables(ptrs, planned_, true);
  }

  void do_attention_planned(const Tensor& q, int list, float scale, Tensor& out) override {
    run_attention(q, planned_[list], scale, out);
  }

  void do_store_kv(const Tensor& k, const Tensor& v, void* k_dst, void* v_dst, DType dtype,
                   const Tensor* scales) override {
    if (dtype == DType::F8E4M3) {
      if (!scales) {  // e4m3 rows moving within the cache
        LB_CUDA(cudaMemcpyAsync(k_dst, k.raw(), k.nbytes(), cudaMemcpyDeviceToDevice, s()));
        LB_CUDA(cudaMemcpyAsync(v_dst, v.raw(), v.nbytes(), cudaMemcpyDeviceToDevice, s()));
        return;
      }
      const int heads = static_cast<int>(k.dim(-2)), dim = static_cast<int>(k.dim(-1));
      const float* sc = scales->f32();
      cuda::quantize_fp8(k.raw(), elt_of(k.dtype(), "store_kv k"), k_dst, k.numel(), heads, dim, sc,
                         s());
      cuda::quantize_fp8(v.raw(), elt_of(v.dtype(), "store_kv v"), v_dst, v.numel(), heads, dim,
                         sc + heads, s());
      return;
    }
    const Elt kt = elt_of(k.dtype(), "store_kv k");
    const Elt vt = elt_of(v.dtype(), "store_kv v");
    const Elt dt = elt_of(dtype, "store_kv storage");
    cuda::convert(k.raw(), kt, k_dst, dt, k.numel(), s());
    cuda::convert(v.raw(), vt, v_dst, dt, v.numel(), s());
  }

  void do_fp8_kv_scales(const Tensor& k, const Tensor& v, Tensor& scales) override {
    const int heads = static_cast<int>(k.dim(-2)), dim = static_cast<int>(k.dim(-1));
    cuda::fp8_kv_scales(k.raw(), v.raw(), elt_of(k.dtype(), "fp8_kv_scales k"),
                        k.numel() / (int64_t(heads) * dim), heads, dim, scales.f32(), s());
  }

  void do_patchify(const Tensor& img, int p, Tensor& rows) override {
    const Elt it = elt_of(img.dtype(), "patchify input");
    const Elt rt = elt_of(rows.dtype(), "patchify output");
    const int64_t sn = img.dim(0), c = img.dim(1), h = img.dim(2), w = img.dim(3);
    cuda::patchify(img.raw(), it, rows.raw(), rt, sn, c, h, w, p, s());
  }

  void do_conv2d(const Tensor& x, const Tensor& w, const Tensor* b, int stride, int pad, Tensor& y,
                 Act act, bool accumulate) override {
    const int64_t n = x.dim(0), ci = x.dim(1), hi = x.dim(2), wi = x.dim(3);
    const int64_t co = w.dim(0), kh = w.dim(2), kw = w.dim(3);
    const int64_t ho = y.dim(2), wo = y.dim(3);
    const int64_t kdim = ci * kh * kw, npix = ho * wo;
    const bool pointwise = kh == 1 && kw == 1 && stride == 1 && pad == 0;
    const bool relu = act == Act::ReLU;
    if (fast_conv(w)) {
      cuda::ConvArgs a = conv_args(x.f32(), hi, wi, w, b, stride, pad, y, act, accumulate);
      run_fast_conv(a);
      return;
    }
    // im2col in pixel chunks so the column buffer stays bounded at any resolution.
    const int64_t chunk = pointwise ? npix : scratch::im2col_chunk_pixels(kdim, npix);
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
        g.accumulate = accumulate;
        gemm(*ctx_, g);
      }
    }
    if (b) cuda::add_channel_bias(y.f32(), b->f32(), n, co, npix, s());
    if (relu) cuda::bias_act(y.raw(), kF32, nullptr, kF32, 1, y.numel(), Act::ReLU, s());
  }

  // The bf16 copy of a convolution's weights in the implicit GEMM's layout, made on first use
  // and kept for the backend's lifetime (weights do not change; the cache holds a reference to
  // the f32 tensor, so its address is never reused for another weight while cached).
  const void* packed_conv_weights(const Tensor& w) {
    std::lock_guard<std::mutex> lock(packed_mutex_);
    PackedConv& p = packed_[w.raw()];
    if (!p.source.defined() || p.source.shape() != w.shape()) {
      const int64_t co = w.dim(0), ci = w.dim(1), kh = w.dim(2), kw = w.dim(3);
      p.source = w;
      p.packed = alloc({scratch::conv_packed_layout_elems(co, ci, kh * kw)}, DType::BF16);
      cuda::conv_pack_weights(w.f32(), p.packed.raw(), co, ci, kh, kw, s());
    }
    return p.packed.raw();
  }

  // A linear layer's bias in the product's dtype (cuBLASLt fuses only that), converted on first
  // use and kept like the packed convolution weights: converting per call was two launches per
  // transformer block.
  const void* converted_bias(const Tensor& b, Elt dt) {
    std::lock_guard<std::mutex> lock(packed_mutex_);
    PackedConv& p = biases_[{b.raw(), dt}];
    if (!p.source.defined() || p.source.shape() != b.shape()) {
      p.source = b;
      p.packed = alloc(b.shape(), dt == kF32 ? DType::F32 : dt == kBF16 ? DType::BF16 : DType::F16);
      cuda::convert(b.raw(), elt_of(b.dtype(), "linear bias"), p.packed.raw(), dt, b.numel(), s());
    }
    return p.packed.raw();
  }

  void do_conv_transpose2d(const Tensor& x, const Tensor& w, const Tensor* b, int stride,
                           Tensor& y) override {
    const int64_t n = x.dim(0), ci = x.dim(1), hi = x.dim(2), wi = x.dim(3);
    const int64_t co = w.dim(1), k = w.dim(2);
    const int64_t npix = hi * wi, rows = co * k * k;
    float* tmp = static_cast<float*>(
        ctx_->scratch.get(scratch::conv_transpose2d_floats(co, k, npix) * 4, s()));
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

  void do_upsample_bilinear(const Tensor& x, Tensor& y, const Tensor* add) override {
    const int64_t nc = x.dim(0) * x.dim(1);
    cuda::upsample_bilinear(x.f32(), y.f32(), nc, x.dim(2), x.dim(3), y.dim(2), y.dim(3),
                            add ? add->f32() : nullptr, add ? add->numel() : 0, s());
  }

  // The tensor-core convolution reads a channels-last bf16 copy of its input anyway: the upsampled
  // image goes straight into it, the same values as upsample_bilinear then conv2d give, without
  // the F32 image at full size (~100 MB a frame at the depth head's last stage).
  void do_upsample_conv2d(const Tensor& x, const Tensor* add, int64_t ho, int64_t wo,
                          const Tensor& w, const Tensor* b, int stride, int pad, Tensor& y,
                          Act act) override {
    if (!fast_conv(w) || x.dim(1) % 32 != 0 || (add && add->numel() % (ho * wo) != 0)) {
      Backend::do_upsample_conv2d(x, add, ho, wo, w, b, stride, pad, y, act);
      return;
    }
    cuda::ConvArgs a = conv_args(x.f32(), ho, wo, w, b, stride, pad, y, act, false);
    a.up_h = static_cast<int>(x.dim(2));
    a.up_w = static_cast<int>(x.dim(3));
    a.add = add ? add->f32() : nullptr;
    a.add_n = add ? add->numel() : 0;
    run_fast_conv(a);
  }

 private:
  // y = act(x . w^T + b) (+ y with `accumulate`).
  // linear and linear_add, operands already checked.
  void matmul(const Tensor& x, const Tensor& w, const Tensor* b, Tensor& y, Act act,
              bool accumulate) {
    const Elt wt = elt_of(w.dtype(), "linear weight");
    const Elt xt = elt_of(x.dtype(), "linear input");
    const Elt yt = elt_of(y.dtype(), "linear output");
    const int64_t k = w.dim(1), n = w.dim(0), m = x.numel() / k;
    Elt bt = b ? elt_of(b->dtype(), "linear bias") : kF32;
    if (m == 0) return;
    // A few rows: one bandwidth-bound kernel with everything fused, no conversions.
    if (cuda::gemv(x.raw(), xt, w.raw(), wt, b ? b->raw() : nullptr, bt, y.raw(), yt, m, n, k, act,
                   accumulate, s()))
      return;

    // An fp32 weight gives an fp32 product (cuBLASLt has no fp32 x fp32 -> bf16 kernels); a
    // mismatched input is converted to the weight's dtype first. cuBLASLt fuses the bias only
    // when it has the output's dtype (measured on H200: an f32 bias on a bf16 output is declined,
    // and the unfused bias pass costs as much as the GEMM at M = 978), so a mismatched bias is
    // converted too; rounding it to bf16 is what autocast does in the reference.
    const bool convert_x = xt != wt;
    const Elt dt = wt == kF32 ? kF32 : yt;
    const bool temp_y = dt != yt;
    const size_t xbytes = convert_x ? round_up(x.numel() * (wt == kF32 ? 4 : 2)) : 0;
    const size_t ybytes = temp_y ? round_up(y.numel() * 4) : 0;
    char* tmp =
        (xbytes + ybytes) ? static_cast<char*>(ctx_->scratch.get(xbytes + ybytes, s())) : nullptr;
    const void* xp = x.raw();
    if (convert_x) {
      cuda::convert(x.raw(), xt, tmp, wt, x.numel(), s());
      xp = tmp;
    }
    void* dp = temp_y ? tmp + xbytes : y.raw();
    if (temp_y && accumulate) cuda::convert(y.raw(), yt, dp, dt, y.numel(), s());
    const void* bp = b ? b->raw() : nullptr;
    if (b && bt != dt) {
      bp = converted_bias(*b, dt);
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
    g.accumulate = accumulate;
    g.relu = act == Act::ReLU;
    // cuBLASLt's GELU epilogue is the tanh form, up to 4.7e-4 off the erf form the model uses:
    // fused only into a bf16 output, whose own rounding is ten times that (rms 1.8e-4 against
    // 1.7e-3 for unit-scale inputs); fp32 outputs and SiLU get a separate pass on the product.
    g.gelu = act == Act::GELU && dt == kBF16;
    const bool fused = gemm(*ctx_, g);
    if (!fused) {
      cuda::bias_act(dp, dt, g.bias, bt, m, n, act, s());
    } else if ((act == Act::GELU && !g.gelu) || act == Act::SiLU) {
      cuda::bias_act(dp, dt, nullptr, bt, m, n, act, s());
    }
    if (temp_y) cuda::convert(dp, dt, y.raw(), yt, y.numel(), s());
  }

  void run_attention(const Tensor& q, const KeyTable& keys, float scale, Tensor& out) {
    AttentionArgs a;
    a.qkv_t = elt_of(q.dtype(), "attention query");
    a.out_t = elt_of(out.dtype(), "attention output");
    a.heads = static_cast<int>(q.dim(-2));
    a.dim = static_cast<int>(q.dim(-1));
    const int64_t nq = q.numel() / (int64_t(a.heads) * a.dim);
    a.nq = static_cast<int>(nq);
    a.q = q.raw();
    a.out = out.raw();
    a.scale = scale;
    a.keys = &keys;
    cuda::attention(*ctx_, a);
  }

  // Puts the key tables of `lists` on the device in one copy: inside a step into its staging
  // (valid for the step's work); outside one, a single table through the upload ring (valid for
  // the work queued next) and a plan into a buffer of our own, which the next plan overwrites in
  // stream order, after the work queued before it has read it.
  void stage_tables(const std::vector<const std::vector<KVSegment>*>& lists,
                    std::vector<KeyTable>& tables, bool plan) {
    std::vector<char> bytes;
    build_key_tables(lists, bytes, tables);
    const char* base = nullptr;
    if (ctx_->step.active() || !plan) {
      base = static_cast<const char*>(ctx_->stage(bytes.data(), bytes.size()));
    } else {
      if (!own_tables_.defined() || own_tables_.nbytes() < bytes.size())
        own_tables_ = alloc({static_cast<int64_t>(bytes.size() * 2)}, DType::U8);
      // From pageable memory: returns once the bytes are staged by the driver.
      LB_CUDA(cudaMemcpyAsync(own_tables_.raw(), bytes.data(), bytes.size(), cudaMemcpyHostToDevice,
                              s()));
      base = static_cast<const char*>(own_tables_.raw());
    }
    for (KeyTable& t : tables) t.dev = base + reinterpret_cast<uintptr_t>(t.dev);
  }

  cudaStream_t s() const { return ctx_->stream; }
  void no_wait_in_step(const char* op) const {
    LINGBOT_CHECK(!ctx_->step.capturing(),
                  std::string("cuda backend: ") + op + " inside a recorded step (a bug)");
  }
  // Whether a convolution with these weights runs on the implicit-GEMM tensor-core kernels.
  // scratch::conv_packs: a 1x1 convolution with few outputs (the depth head's last, 32 -> 2
  // channels at full resolution) stays a GEMM, as the channels-last copy of its input would cost
  // more than the product.
  bool fast_conv(const Tensor& w) const {
    return fast_convs_ && w.dim(2) == w.dim(3) && scratch::conv_packs(w.dim(0), w.dim(1), w.dim(2));
  }
  cuda::ConvArgs conv_args(const float* x, int64_t hi, int64_t wi, const Tensor& w, const Tensor* b,
                           int stride, int pad, Tensor& y, Act act, bool accumulate) {
    cuda::ConvArgs a;
    a.x = x;
    a.w = packed_conv_weights(w);
    a.bias = b ? b->f32() : nullptr;
    a.y = y.f32();
    a.images = static_cast<int>(y.dim(0));
    a.ci = static_cast<int>(w.dim(1));
    a.hi = static_cast<int>(hi);
    a.wi = static_cast<int>(wi);
    a.co = static_cast<int>(w.dim(0));
    a.ho = static_cast<int>(y.dim(2));
    a.wo = static_cast<int>(y.dim(3));
    a.kh = static_cast<int>(w.dim(2));
    a.kw = static_cast<int>(w.dim(3));
    a.stride = stride;
    a.pad = pad;
    a.relu = act == Act::ReLU;
    a.accumulate = accumulate;
    return a;
  }
  void run_fast_conv(const cuda::ConvArgs& a) {
    const cuda::ConvPlan plan = cuda::conv_plan(a, ctx_->prop.multiProcessorCount, ctx_->hopper);
    cuda::conv2d_bf16(a, plan, ctx_->scratch.get(plan.scratch_bytes(), s()), s());
  }

  std::shared_ptr<Context> ctx_;
  StagedUpload staged_;  // weights' host-to-device copies (declared after ctx_: freed first)
  bool fast_convs_ = false;
  std::atomic<uint64_t> fences_{0};
  std::vector<KeyTable> planned_;  // the latest plan_attention
  Tensor own_tables_;              // key tables made outside a step
  struct PackedConv {
    Tensor source, packed;
  };
  std::mutex packed_mutex_;
  std::map<const void*, PackedConv> packed_;                  // packed_conv_weights
  std::map<std::pair<const void*, Elt>, PackedConv> biases_;  // converted_bias
};

std::shared_ptr<Context> make_context(int device, GpuPath path) {
  switches();  // the environment's switches, read once when the first backend starts
  auto ctx = std::make_shared<Context>();
  ctx->device = device;
  LB_CUDA(cudaSetDevice(device));
  LB_CUDA(cudaGetDeviceProperties(&ctx->prop, device));
  ctx->hopper = runs_sm90a(ctx->prop) && path != GpuPath::kPortable;
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
  size_t free_b = 0, total_b = 0;
  if (cudaMemGetInfo(&free_b, &total_b) == cudaSuccess) ctx->context_bytes = total_b - free_b;
  ctx->lt_workspace_bytes = scratch::kGemmWorkspaceBytes;
  LB_CUDA(cudaMallocAsync(&ctx->lt_workspace, ctx->lt_workspace_bytes, ctx->stream));
  // Classic cuBLAS gets the same workspace (its calls and cuBLASLt's run in one stream, one after
  // the other), so that it never allocates one itself inside a recorded step. Setting the stream
  // resets the workspace, hence this order, once.
  LB_CUBLAS(cublasSetStream(ctx->blas, ctx->stream));
  LB_CUBLAS(cublasSetWorkspace(ctx->blas, ctx->lt_workspace, ctx->lt_workspace_bytes));
  return ctx;
}

}  // namespace

namespace {
std::atomic<int> plain_launch_holds[64] = {};
}  // namespace

void hold_plain_launches(int device, int delta) {
  if (device >= 0 && device < 64) plain_launch_holds[device].fetch_add(delta);
}

bool dependent_launch() {
  if (!switches().pdl) return false;
  // Per device, found on first use: 0 not yet known, 1 yes, 2 no.
  static std::atomic<int> known[64] = {};
  int device = 0;
  if (cudaGetDevice(&device) != cudaSuccess || device < 0 || device >= 64) {
    cudaGetLastError();
    return false;
  }
  if (plain_launch_holds[device].load(std::memory_order_relaxed) > 0) return false;
  int k = known[device].load(std::memory_order_relaxed);
  if (k == 0) {
    int major = 0, minor = 0;
    const bool ok =
        cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, device) == cudaSuccess &&
        cudaDeviceGetAttribute(&minor, cudaDevAttrComputeCapabilityMinor, device) == cudaSuccess;
    if (!ok) cudaGetLastError();
    k = ok && major == 9 && minor == 0 ? 1 : 2;
    known[device].store(k, std::memory_order_relaxed);
  }
  return k == 1;
}

}  // namespace cuda

std::unique_ptr<Backend> make_cuda_backend(std::string* why) {
  return make_cuda_backend(0, why);
}

bool cuda_reads_fp8_kv(int device) {
  cudaDeviceProp prop{};
  if (cudaGetDeviceProperties(&prop, device) != cudaSuccess) {
    cudaGetLastError();
    return false;
  }
  return prop.major >= 8;  // every GPU the backend runs on (see make_cuda_backend)
}

bool cuda_peak_bf16_flops(int device, double* flops, std::string* name) {
  cudaDeviceProp prop{};
  if (cudaGetDeviceProperties(&prop, device) != cudaSuccess) {
    cudaGetLastError();
    return false;
  }
  int khz = 0;  // cudaDeviceProp::clockRate is gone from CUDA 13
  if (cudaDeviceGetAttribute(&khz, cudaDevAttrClockRate, device) != cudaSuccess) {
    cudaGetLastError();
    return false;
  }
  // Dense bf16 with fp32 accumulation, FLOP per clock per SM, from the published peaks: A100
  // and H100/H200 (and the data-centre Blackwells) run twice and four times the consumer parts.
  const int cc = prop.major * 10 + prop.minor;
  const double per_clock = cc == 80 ? 2048 : cc == 90 ? 4096 : cc == 100 ? 8192 : 512;
  *flops = per_clock * prop.multiProcessorCount * khz * 1e3;
  *name = prop.name;
  return true;
}

std::unique_ptr<Backend> make_cuda_backend(int device, std::string* why, GpuPath path) {
  int count = 0;
  const cudaError_t e = cudaGetDeviceCount(&count);
  if (e != cudaSuccess || count == 0) {
    if (e != cudaSuccess) cudaGetLastError();
    if (why)
      *why = std::string("no usable CUDA device: ") +
             (e != cudaSuccess ? cudaGetErrorString(e) : "the driver reports none");
    return nullptr;
  }
  if (device < 0 || device >= count) {
    if (why)
      *why = "there is no CUDA device " + std::to_string(device) + " (this machine has " +
             std::to_string(count) + ": cuda:0" +
             (count > 1 ? " to cuda:" + std::to_string(count - 1) : std::string()) + ")";
    return nullptr;
  }
  try {
    cudaDeviceProp prop{};
    if (cudaGetDeviceProperties(&prop, device) != cudaSuccess || prop.major < 8) {
      if (why)
        *why = "CUDA device " + std::to_string(device) + " (" + prop.name +
               ") is below sm_80, which the bf16 tensor-core kernels need";
      return nullptr;
    }
    if (path == GpuPath::kHopper && !cuda::runs_sm90a(prop)) {
      if (why)
        *why = "the Hopper path needs a compute capability 9.0 GPU (H100, H200); CUDA device " +
               std::to_string(device) + " (" + prop.name + ") is sm_" + std::to_string(prop.major) +
               std::to_string(prop.minor);
      return nullptr;
    }
    return std::make_unique<cuda::CudaBackend>(cuda::make_context(device, path));
  } catch (const std::exception& ex) {
    if (why) *why = ex.what();
    return nullptr;
  }
}

}  // namespace lingbot
