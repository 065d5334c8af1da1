// The op interface every backend implements. Model code calls only these, so the CPU reference
// and the GPU path run the same graph. Tensors are contiguous and live on the backend's device;
// outputs are preallocated by the caller (no allocation inside a step).
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "lingbot/tensor.h"

namespace lingbot {

// GELU is the exact erf form; Exp and ExpP1 (1 + exp) are the depth head's output activations.
enum class Act : uint8_t { None, GELU, ReLU, SiLU, Exp, ExpP1 };

// One contiguous run of cached tokens: K and V rows laid out [tokens][heads][head_dim] in the
// dtype of the queries that attend to them (the cache's storage dtype), or in F8E4M3 when
// `scales` is set: then a stored value times its head's scale is the value ([2, heads] F32 on
// the backend's device, K's scales then V's; every segment of one attention shares them).
// Attention reads a list of these (pages, the special stream, the current frame) and never
// gathers them into one copy.
struct KVSegment {
  const void* k = nullptr;
  const void* v = nullptr;
  int32_t tokens = 0;
  const float* scales = nullptr;
};

// A copy of `bytes` bytes between two places in a backend's memory (see copy_ranges).
struct ByteRange {
  const void* src = nullptr;
  void* dst = nullptr;
  size_t bytes = 0;
};

// Largest |value| of the rows that set fp8 K/V scales, as a fraction of e4m3's largest finite
// value (448): later rows up to this many times larger still fit before saturating. e4m3 is a
// float, so the headroom costs no relative precision; only values below 1/1792 of that largest
// one fall into its subnormals, where the absolute error stays below 3.5e-5 of it.
constexpr float kFp8Headroom = 16.f;
// The scale of a head whose largest |value| is amax (both backends compute exactly this).
#ifdef __CUDACC__
__host__ __device__
#endif
    inline float
    fp8_scale(float amax) {
  return amax > 0.f && amax <= 3.0e38f ? amax * (kFp8Headroom / 448.f) : 1.f;
}

// Rotary embedding for the rows of q/k: cos and sin [rows, head_dim/2], one angle per pair.
// Pair p rotates (x0, x1) to (x0 c - x1 s, x0 s + x1 c). Which dims form pair p:
//   HalfSplit:   head split in two halves of D/2; in half h, pair j (j < D/4) is
//                (h*D/2 + j, h*D/2 + j + D/4); table column h*D/4 + j.  (2D RoPE, frame blocks)
//   Interleaved: pair p is (2p, 2p+1).                                     (3D RoPE, global blocks)
enum class RopePairs : uint8_t { HalfSplit, Interleaved };
struct Rope {
  Tensor cos, sin;  // F32 [rows, head_dim / 2] on the backend's device
  RopePairs pairs = RopePairs::Interleaved;
};

// Cache storage for the K/V rows of split_qkv, frame by frame: frame f (rows f * rows_per_frame
// onwards) goes to frames[f].k / .v in storage dtype `dtype`; `scales` as in store_kv (each
// frame its own, as frames of different sequences have their own cache).
struct KVDestination {
  struct Frame {
    void* k = nullptr;
    void* v = nullptr;
    const Tensor* scales = nullptr;
  };
  std::vector<Frame> frames;
  int64_t rows_per_frame = 0;
  DType dtype = DType::BF16;
};

// LayerNorm over each head's head_dim values, one affine shared by all heads.
struct QKNorm {
  const Tensor* q_weight = nullptr;
  const Tensor* q_bias = nullptr;
  const Tensor* k_weight = nullptr;
  const Tensor* k_bias = nullptr;
  float eps = 1e-5f;
};

// A backend's public ops check their operands here, the same way on every backend: each tensor
// lives on this backend's device in a dtype it computes in, and the shapes fit together; a bad
// operand is one lingbot::Error line naming the op. The checked call then goes to the backend's
// do_* implementation, which may assume all of that.
class Backend {
 public:
  virtual ~Backend() = default;
  virtual Device device() const = 0;
  virtual std::string name() const = 0;

  // Memory. alloc returns uninitialised memory; upload/download convert host <-> device.
  virtual Tensor alloc(const Shape& shape, DType dtype) = 0;
  virtual Tensor upload(const Tensor& host, DType dtype) = 0;
  virtual Tensor download(const Tensor& t) = 0;  // host F32
  void copy(const Tensor& src, Tensor& dst);     // same numel; converts dtype
  void fill(Tensor& t, float value);
  // Copies every range, bytes as they are; no range's destination may overlap another range.
  // The GPU does all of them in one launch where a copy each would cost a launch and a gap each
  // (the cache moves an evicted frame's special rows of every layer this way).
  void copy_ranges(const std::vector<ByteRange>& ranges);
  virtual void synchronize() {}
  // Makes the backend's device current on the calling thread (CUDA: the runtime queues work on
  // the thread's current device). A thread calls it before its first op, and again after it may
  // have worked for another device's backend: sessions do on every entry.
  virtual void use_on_this_thread() const {}
  // Lets F32 convolutions run on tensor cores with reduced-precision inputs (bf16 for 3x3
  // kernels, TF32 otherwise) and fp32 accumulation; PyTorch runs the reference's convolutions on
  // TF32 by default. Off unless asked; the CPU ignores it.
  virtual void allow_fast_convolutions(bool on) {}
  // Copies t (any dtype) into host memory as F32: t.numel() floats at `host`.
  virtual void download_into(const Tensor& t, float* host);
  // Bytes as they are between this backend's memory and the host, waiting for the work queued
  // before (a session snapshot moves its caches in their stored dtype, e4m3 and bf16 included,
  // with no conversion to round). Outside a step only. The CPU's memory is the host's.
  virtual void read_bytes(const void* src, void* host, size_t bytes);
  virtual void write_bytes(const void* host, void* dst, size_t bytes);

  // Pipelining: work is queued, and the host waits only for what it needs. alloc_host gives host
  // memory the device can copy into while it computes (pinned on CUDA); download_async queues a
  // copy of t (F32) into it, complete once a later fence() has been waited for. fence() marks
  // the work queued so far; wait_fence blocks until it is done (the last few fences only).
  virtual Tensor alloc_host(const Shape& shape) { return Tensor::zeros(shape); }
  void download_async(const Tensor& t, float* host);
  // Whether work is queued and runs beside the host (CUDA) or is done when the call returns.
  virtual bool queues_work() const { return false; }
  virtual uint64_t fence() { return 0; }
  virtual void wait_fence(uint64_t) {}
  // One streaming step: the work queued between begin_step and end_step may be recorded and
  // launched as one unit (a CUDA graph), so the host must not wait for the device in between
  // (no download, no synchronize). abort_step drops an unfinished step after an error.
  virtual void begin_step(bool record) {}
  virtual void end_step() {}
  virtual void abort_step() {}
  // Two independent chains of work side by side (the camera head beside the depth head): after
  // begin_side() ops go to a second queue that starts once the work queued before it is done;
  // after end_side() they go to the main queue again and run beside the side queue's; join_side()
  // makes the main queue wait for the side's work (end_step and fence join on their own). The
  // two chains must not write what the other reads; each queue has its own scratch. A backend
  // with one queue (the CPU) runs everything in order and these do nothing.
  virtual void begin_side() {}
  virtual void end_side() {}
  virtual void join_side() {}
  // Host F32 data for work queued next, without a lasting allocation: inside a step the returned
  // tensor stays valid for that step's work; outside one it is an ordinary upload.
  virtual Tensor upload_transient(const Tensor& host) { return upload(host, DType::F32); }
  // Copies host F32 data into the existing tensor dst (converting to its dtype). On CUDA the copy
  // is queued: `host` (from alloc_host) must stay unchanged until a later fence has completed.
  void upload_into(const Tensor& host, Tensor& dst);
  // Device memory in use by the whole process (driver view), 0 on the CPU.
  virtual size_t device_memory_used() const { return 0; }
  // Device memory still free for this process (driver view); 0 = unknown, as on the CPU.
  virtual size_t device_memory_free() const { return 0; }
  // Whether attention reads an e4m3 KV cache here (KVSegment::scales): the CPU always; CUDA on
  // every GPU it runs on (sm_80 and newer): the Hopper kernel takes S on e4m3 operands, the
  // mma.sync kernel widens the bytes to bf16 as it loads them.
  virtual bool reads_fp8_kv() const { return true; }

  // y[M,N] = act(x[M,K] . w[N,K]^T + b[N]).
  void linear(const Tensor& x, const Tensor& w, const Tensor* b, Tensor& y, Act act = Act::None);
  // y[M,N] += x[M,K] . w[N,K]^T + b[N]: a residual update in one pass, the product added to y
  // in y's dtype without being rounded to a narrower one first.
  void linear_add(const Tensor& x, const Tensor& w, const Tensor* b, Tensor& y);
  // LayerNorm over the last dim (biased variance, eps inside the root); weight/bias optional.
  void layer_norm(const Tensor& x, const Tensor* weight, const Tensor* bias, float eps, Tensor& y);
  // linear(layer_norm(x), w, b, y, act) with `normed` (x's shape) for the norm's output; a backend
  // may compute the norm inside the product instead and leave `normed` as it was (the GPU for a
  // few rows: the camera head's, where each norm would be a launch of its own).
  void layer_norm_linear(const Tensor& x, const Tensor* norm_w, const Tensor* norm_b, float eps,
                         Tensor& normed, const Tensor& w, const Tensor* b, Tensor& y,
                         Act act = Act::None);
  // x += alpha * gamma ⊙ y. gamma (optional) spans the last dim; y broadcasts over the leading
  // dims of x when it has fewer elements (y.numel() must divide x.numel()).
  void add(Tensor& x, const Tensor& y, const Tensor* gamma = nullptr, float alpha = 1.0f);
  void activate(Tensor& x, Act act);  // in place
  // y[M, Ca+Cb] = [a[M,Ca] | b[M,Cb]], one dtype.
  void concat_last(const Tensor& a, const Tensor& b, Tensor& y);
  // y[B, C, R] = x[B, R, C]^T per batch item, one dtype.
  void transpose_last2(const Tensor& x, Tensor& y);

  // qkv[M, 3*H*D] -> q, k, v [M, H, D]; then optional per-head norm and rotary on q and k.
  // With `into`, K and V go straight into cache storage instead (as store_kv would put the k and
  // v outputs there, bit for bit); k and v are then scratch whose contents are unspecified.
  void split_qkv(const Tensor& qkv, const QKNorm* norm, const Rope* rope, Tensor& q, Tensor& k,
                 Tensor& v, const KVDestination* into = nullptr);
  // out[Nq, H, D] = softmax(q . K^T * scale) . V over all segments' tokens, no mask.
  void attention(const Tensor& q, const std::vector<KVSegment>& kv, float scale, Tensor& out);
  // Key lists fixed for a whole step (each global layer's pages and stream rows, each frame's
  // own keys in the frame blocks) are handed over once: a backend builds its key tables in one
  // go (the plan) instead of once per call, and attention_planned runs list `list` of the latest
  // plan like attention() would. A plan holds until the next plan_attention; the storage it
  // names must stay put that long.
  void plan_attention(const std::vector<std::vector<KVSegment>>& lists);
  void attention_planned(const Tensor& q, int list, float scale, Tensor& out);
  // Writes rows[n, H, D] into cache storage at `k_dst`/`v_dst` (storage dtype `dtype`). F8E4M3
  // storage holds value / scale rounded to nearest (saturating at 448), with `scales` as in
  // KVSegment; rows that are F8E4M3 already (moved within the cache) are copied as they are.
  void store_kv(const Tensor& k, const Tensor& v, void* k_dst, void* v_dst, DType dtype,
                const Tensor* scales = nullptr);
  // scales[2, H] (F32) for e4m3 storage of rows like k and v [n, H, D]: each head's largest |K|
  // (and |V|) maps to 448 / kFp8Headroom; a head of zeros gets 1.
  void fp8_kv_scales(const Tensor& k, const Tensor& v, Tensor& scales);

  // Image ops, NCHW, F32.
  // img[S, C, H, W] -> rows [S * (H/p) * (W/p), C*p*p] in (c, ky, kx) order.
  void patchify(const Tensor& img, int patch, Tensor& rows);
  // y = act(conv(x, w[Co, Ci, kh, kw]) + b) with zero padding, act None or ReLU; with
  // `accumulate` (and no act) the result is added to y instead: a residual in the same pass.
  void conv2d(const Tensor& x, const Tensor& w, const Tensor* b, int stride, int pad, Tensor& y,
              Act act = Act::None, bool accumulate = false);
  // Transposed conv with kernel == stride, no padding; w[Ci, Co, k, k].
  void conv_transpose2d(const Tensor& x, const Tensor& w, const Tensor* b, int stride, Tensor& y);
  // Bilinear resize to y's size with align_corners = true; with `add`, y = resize(x) + add, the
  // addend repeated over y as add() broadcasts (a position embedding over the frames of a batch).
  void upsample_bilinear(const Tensor& x, Tensor& y, const Tensor* add = nullptr);
  // conv2d over upsample_bilinear(x, to ho x wo, add): the same results, but a backend need not
  // hold the upsampled image in memory (the depth head's full-resolution stage).
  void upsample_conv2d(const Tensor& x, const Tensor* add, int64_t ho, int64_t wo, const Tensor& w,
                       const Tensor* b, int stride, int pad, Tensor& y, Act act = Act::None);

 protected:
  // The dtypes this backend stores and computes in; operands in any other are refused.
  virtual bool handles(DType t) const = 0;

  // The ops above, operands checked.
  virtual void do_copy(const Tensor& src, Tensor& dst) = 0;
  virtual void do_fill(Tensor& t, float value) = 0;
  virtual void do_copy_ranges(const std::vector<ByteRange>& ranges) = 0;
  virtual void do_download_async(const Tensor& t, float* host) { download_into(t, host); }
  virtual void do_upload_into(const Tensor& host, Tensor& dst);
  virtual void do_linear(const Tensor& x, const Tensor& w, const Tensor* b, Tensor& y, Act act) = 0;
  virtual void do_linear_add(const Tensor& x, const Tensor& w, const Tensor* b, Tensor& y) = 0;
  virtual void do_layer_norm(const Tensor& x, const Tensor* weight, const Tensor* bias, float eps,
                             Tensor& y) = 0;
  // The default normalizes into `normed`, then multiplies.
  virtual void do_layer_norm_linear(const Tensor& x, const Tensor* norm_w, const Tensor* norm_b,
                                    float eps, Tensor& normed, const Tensor& w, const Tensor* b,
                                    Tensor& y, Act act);
  virtual void do_add(Tensor& x, const Tensor& y, const Tensor* gamma, float alpha) = 0;
  virtual void do_activate(Tensor& x, Act act) = 0;
  virtual void do_concat_last(const Tensor& a, const Tensor& b, Tensor& y) = 0;
  virtual void do_transpose_last2(const Tensor& x, Tensor& y) = 0;
  virtual void do_split_qkv(const Tensor& qkv, const QKNorm* norm, const Rope* rope, Tensor& q,
                            Tensor& k, Tensor& v) = 0;
  // The default splits into k and v and stores them frame by frame.
  virtual void do_split_qkv_into(const Tensor& qkv, const QKNorm* norm, const Rope* rope, Tensor& q,
                                 Tensor& k, Tensor& v, const KVDestination& into);
  virtual void do_attention(const Tensor& q, const std::vector<KVSegment>& kv, float scale,
                            Tensor& out) = 0;
  // The default keeps the lists and runs the planned one through do_attention.
  virtual void do_plan_attention(const std::vector<std::vector<KVSegment>>& lists) {}
  virtual void do_attention_planned(const Tensor& q, int list, float scale, Tensor& out);
  virtual void do_store_kv(const Tensor& k, const Tensor& v, void* k_dst, void* v_dst, DType dtype,
                           const Tensor* scales) = 0;
  virtual void do_fp8_kv_scales(const Tensor& k, const Tensor& v, Tensor& scales) = 0;
  virtual void do_patchify(const Tensor& img, int patch, Tensor& rows) = 0;
  virtual void do_conv2d(const Tensor& x, const Tensor& w, const Tensor* b, int stride, int pad,
                         Tensor& y, Act act, bool accumulate) = 0;
  virtual void do_conv_transpose2d(const Tensor& x, const Tensor& w, const Tensor* b, int stride,
                                   Tensor& y) = 0;
  virtual void do_upsample_bilinear(const Tensor& x, Tensor& y, const Tensor* add) = 0;
  // The default upsamples into a temporary and convolves it.
  virtual void do_upsample_conv2d(const Tensor& x, const Tensor* add, int64_t ho, int64_t wo,
                                  const Tensor& w, const Tensor* b, int stride, int pad, Tensor& y,
                                  Act act);

 private:
  // `what` of op `op` lives on this device, in a dtype this backend handles (F32 if `f32`).
  void check(const Tensor& t, const char* op, const char* what, bool f32 = false) const;
  void check_query(const Tensor& q, const Tensor& out) const;  // of attention
  void check_layer_norm(const char* op, const Tensor& x, const Tensor* w, const Tensor* b,
                        const Tensor& y) const;
  void check_linear(const char* op, const Tensor& x, const Tensor& w, const Tensor* b,
                    const Tensor& y) const;
  // Of conv2d and upsample_conv2d: weight, bias and output against the input as convolved, of
  // shape `in` (x itself checked by the caller); `input` describes it in the message.
  void check_conv(const char* op, const Shape& in, const Tensor& w, const Tensor* b, int stride,
                  int pad, const Tensor& y, const std::string& input) const;
  std::vector<std::vector<KVSegment>> planned_;  // the default plan: the lists themselves
};

std::unique_ptr<Backend> make_cpu_backend(int threads = 0);  // 0: all cores
// Null when the build has no CUDA or no such device is present; `why` says which. The first
// form is device 0.
std::unique_ptr<Backend> make_cuda_backend(std::string* why = nullptr);
// Which kernels the CUDA backend runs. kAuto: the Hopper kernels (wgmma attention and
// convolutions, programmatic dependent launch) on compute capability 9.0, the portable ones
// elsewhere. kPortable: what an sm_80/86/89 GPU runs, on any GPU (mma.sync attention, mma.sync
// convolutions, plain launches): the path most users' GPUs take, measurable on an H100. kHopper:
// kAuto, but an error where the GPU is not compute capability 9.0. cuBLASLt picks its own GEMM
// kernels for the GPU at hand either way.
enum class GpuPath { kAuto, kHopper, kPortable };
// "auto", "hopper" or "portable"; anything else throws an InvalidArgument Error.
GpuPath parse_gpu_path(const std::string& name);
std::unique_ptr<Backend> make_cuda_backend(int device, std::string* why,
                                           GpuPath path = GpuPath::kAuto);
// Backend::reads_fp8_kv of CUDA device `device`, without making a backend (false when there is
// no such device or no CUDA build).
bool cuda_reads_fp8_kv(int device);
// The dense bf16 tensor-core rate of CUDA device `device` in FLOP/s from its properties (SMs x
// clock x the FLOP per clock of its architecture), and its name; false when there is no such
// device or no CUDA build. A stated peak, for estimates: kernels reach a fraction of it.
bool cuda_peak_bf16_flops(int device, double* flops, std::string* name);

}  // namespace lingbot
