// Shared by the CUDA backend's host files and kernels: error checks, the device context (stream,
// library handles, scratch memory) and the launchers each kernel file exports.
#pragma once

#include <cublasLt.h>
#include <cublas_v2.h>
#include <cuda_runtime.h>

#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <memory>
#include <string>
#include <vector>

#include "backend/ops.h"
#include "backend/scratch.h"
#include "backend/switches.h"
#include "lingbot/error.h"
#include "lingbot/tensor.h"

namespace lingbot::cuda {

[[noreturn]] void fail(const char* what, const char* detail, const char* file, int line);

// LINGBOT_CUDA_VERBOSE (backend/switches.h): 1 prints the step recorder's counters and slow
// steps, each GEMM plan once and the memory at exit; 2 adds a line for every attention call,
// ~13,000 a run, which is too many for a timed run.
inline int verbose_level() {
  return switches().cuda_verbose;
}

#define LB_CUDA(expr)                                                           \
  do {                                                                          \
    cudaError_t e_ = (expr);                                                    \
    if (e_ != cudaSuccess)                                                      \
      ::lingbot::cuda::fail(#expr, cudaGetErrorString(e_), __FILE__, __LINE__); \
  } while (0)

#define LB_CUBLAS(expr)                                                            \
  do {                                                                             \
    cublasStatus_t s_ = (expr);                                                    \
    if (s_ != CUBLAS_STATUS_SUCCESS)                                               \
      ::lingbot::cuda::fail(#expr, cublasGetStatusString(s_), __FILE__, __LINE__); \
  } while (0)

// Element types the kernels understand, passed as a small integer so that parameter vectors
// (biases, LayerNorm affines, LayerScale) can be of either dtype without template blow-up.
enum Elt : int { kF32 = 0, kBF16 = 1, kF16 = 2 };
Elt elt_of(DType t, const char* what);  // throws for dtypes the kernels do not handle
inline bool is_float_elt(DType t) {
  return t == DType::F32 || t == DType::BF16 || t == DType::F16;
}

struct Context;

// Device memory for tensors and scratch, from the stream-ordered pool. While a step is being
// recorded as a CUDA graph, allocations are made on a side stream and waited for, so that the
// graph holds no memory nodes (and stays updatable) and the memory still comes from the pool;
// frees wait until the recorded work has been launched.
void* device_malloc(Context& ctx, size_t bytes);
void device_free(Context& ctx, void* p);

// Stream-ordered scratch: one grow-only device block reused by consecutive ops on the stream.
// An op takes all its temporaries from a single request, so nothing it holds is invalidated.
class Scratch {
 public:
  void* get(size_t bytes, cudaStream_t stream);
  void release();
  void bind(Context* ctx) { ctx_ = ctx; }

 private:
  Context* ctx_ = nullptr;
  void* ptr_ = nullptr;
  size_t cap_ = 0;
};

// One streaming step (Backend::begin_step .. end_step). Host data the step's kernels read
// (the frame, attention segment tables, rope tables) is staged in pinned blocks that stay
// untouched until the step has run on the device. With recording on, the step is captured as a
// CUDA graph and launched: the first time instantiated, afterwards the executable graph is
// updated in place (same kernels, new arguments), re-instantiated only when the sequence of
// kernels changed; its staged bytes go up just before, one copy a block on a queue of their own,
// instead of a copy node (and a gap) each inside the graph. Two arenas alternate, as the host
// prepares one step ahead.
class StepRecorder {
 public:
  ~StepRecorder();
  void begin(cudaStream_t stream, bool record);
  void end(cudaStream_t stream);    // launches the recorded graph
  void abort(cudaStream_t stream);  // after an error inside the step
  bool active() const { return active_; }
  bool capturing() const { return capturing_; }
  // Device copy of `bytes` host bytes, valid for the work of this step.
  void* stage(const void* data, size_t bytes, cudaStream_t stream);
  void defer_free(void* p) { deferred_.push_back(p); }
  void note_allocation(size_t bytes);  // made while recording

  struct Counters {
    int64_t recorded = 0, updated = 0, instantiated = 0, allocations = 0;
  };
  const Counters& counters() const { return counters_; }

 private:
  struct Block {
    char* host = nullptr;
    char* dev = nullptr;
    size_t cap = 0, used = 0;
  };
  struct Arena {
    std::vector<Block> blocks;
    cudaEvent_t done = nullptr;
    cudaGraphExec_t exec = nullptr;
  };
  void flush_deferred(cudaStream_t stream);
  void upload_staged(const Arena& a, cudaStream_t stream);
  Arena arenas_[2];
  cudaStream_t copies_ = nullptr;  // the staged bytes' queue, and its event for the step
  cudaEvent_t staged_ = nullptr;
  int arena_ = 0;
  bool active_ = false, capturing_ = false;
  int64_t allocations_ = 0;
  std::vector<void*> deferred_;
  Counters counters_;
};

// Small host tables (attention's segment list) copied to the device through pinned slots; an
// event per slot keeps the host from overwriting a slot whose copy has not run yet.
class UploadRing {
 public:
  ~UploadRing();
  // Returns a device pointer holding `bytes` from `data`, valid for work queued after it.
  void* put(const void* data, size_t bytes, cudaStream_t stream);

 private:
  static constexpr int kSlots = 64;  // enough for the host to queue a frame ahead
  void grow(size_t bytes, cudaStream_t stream);
  size_t cap_ = 0;
  int next_ = 0;
  char* host_ = nullptr;
  char* dev_ = nullptr;
  cudaEvent_t done_[kSlots] = {};
};

// Declared first in Context so the stream outlives the members that free memory on it.
struct StreamOwner {
  cudaStream_t stream = nullptr;
  ~StreamOwner();
};

// Compute capability 9.0 exactly (H100, H200): the sm_90a cubin of the Hopper kernels runs
// nowhere else, and the PTX the build embeds for other GPUs carries an empty body for them.
inline bool runs_sm90a(const cudaDeviceProp& p) {
  return p.major == 9 && p.minor == 0;
}

// Whether launch_kernel() (device_utils.cuh) asks for programmatic dependent launch: on devices
// that run the sm_90a code (newer GPUs run the compute_80 PTX, whose await_inputs() is empty),
// unless LINGBOT_PDL=0 (read once; for measuring what it gives) or a backend on the portable path
// (GpuPath::kPortable) lives on the device: plain launches are always correct, so a Hopper-path
// backend beside it only loses the overlap.
bool dependent_launch();
// Counts the portable-path backends of `device` (+1 when one starts, -1 when it ends).
void hold_plain_launches(int device, int delta);

struct Context {
  StreamOwner owner;
  int device = 0;
  cudaDeviceProp prop{};
  // The Hopper kernels run (wgmma attention and convolutions): compute capability 9.0 and not
  // GpuPath::kPortable. Every sm_90a-only choice asks this, never the device itself.
  bool hopper = false;
  cudaStream_t stream = nullptr;        // == owner.stream
  cudaStream_t alloc_stream = nullptr;  // allocations made while the stream is being recorded
  cublasLtHandle_t lt = nullptr;
  cublasHandle_t blas = nullptr;
  void* lt_workspace = nullptr;
  size_t lt_workspace_bytes = 0;
  size_t context_bytes = 0;  // device memory in use once the context and libraries are up
  Scratch scratch;
  // The side queue (Backend::begin_side): while it is current, `stream`, `scratch` and
  // `lt_workspace` are swapped with these, so every op queues there without knowing.
  cudaStream_t side_stream = nullptr;
  Scratch side_scratch;
  void* side_lt_workspace = nullptr;
  size_t side_lt_workspace_bytes = scratch::kSideGemmWorkspaceBytes;
  cudaEvent_t fork_event = nullptr, join_event = nullptr;
  bool on_side = false, side_pending = false;
  UploadRing ring;
  StepRecorder step;
  static constexpr int kFences = 64;
  cudaEvent_t fences[kFences] = {};

  Context() {
    scratch.bind(this);
    side_scratch.bind(this);
  }
  // Host bytes copied to the device for work queued next: staged in the current step when one
  // is open, else through the upload ring.
  void* stage(const void* data, size_t bytes) {
    return step.active() ? step.stage(data, bytes, stream) : ring.put(data, bytes, stream);
  }
  Context(const Context&) = delete;
  Context& operator=(const Context&) = delete;
  ~Context();
};

// Device memory owned by a Tensor: freed on the context's stream, which the deleter keeps alive.
Tensor device_tensor(const std::shared_ptr<Context>& ctx, const Shape& shape, DType dtype);

// ---- kv_fp8.cu -------------------------------------------------------------------------------
// scales[2, heads] from rows k, v [rows, heads, dim] of dtype t (see Backend::fp8_kv_scales).
void fp8_kv_scales(const void* k, const void* v, Elt t, int64_t rows, int heads, int dim,
                   float* scales, cudaStream_t s);
// dst[i] = e4m3(src[i] / scales[head of i]) over n elements of [rows, heads, dim].
void quantize_fp8(const void* src, Elt t, void* dst, int64_t n, int heads, int dim,
                  const float* scales, cudaStream_t s);

// ---- elementwise.cu --------------------------------------------------------------------------
void convert(const void* src, Elt st, void* dst, Elt dt, int64_t n, cudaStream_t s);
void fill(void* dst, Elt dt, int64_t n, float value, cudaStream_t s);
void copy_ranges(const ByteRange* ranges, size_t n, cudaStream_t s);
// y[m, n] = act(y + bias[n]) in place; bias may be null.
void bias_act(void* y, Elt yt, const void* bias, Elt bt, int64_t m, int64_t n, Act act,
              cudaStream_t s);
void layer_norm(const void* x, Elt xt, const void* w, Elt wt, const void* b, Elt bt, float eps,
                void* y, Elt yt, int64_t rows, int64_t n, cudaStream_t s);
// x[i] += alpha * gamma[i % c] * y[i % ny]
void add(void* x, Elt xt, const void* y, Elt yt, int64_t n, int64_t ny, const void* gamma, Elt gt,
         int64_t c, float alpha, cudaStream_t s);
void concat_last(const void* a, const void* b, void* y, int64_t m, int64_t ca, int64_t cb,
                 size_t elem, cudaStream_t s);
void transpose_last2(const void* x, void* y, int64_t batch, int64_t r, int64_t c, size_t elem,
                     cudaStream_t s);

// ---- qkv.cu ----------------------------------------------------------------------------------
struct SplitQkvArgs {
  const void* qkv = nullptr;
  Elt qkv_t = kF32;
  void *q = nullptr, *k = nullptr, *v = nullptr;
  Elt out_t = kF32;
  int64_t rows = 0;
  int heads = 0, dim = 0;
  const void *qw = nullptr, *qb = nullptr, *kw = nullptr, *kb = nullptr;
  Elt qw_t = kF32, qb_t = kF32, kw_t = kF32, kb_t = kF32;
  bool norm = false;
  float eps = 1e-5f;
  const float *cos = nullptr, *sin = nullptr;  // null: no rotary
  bool interleaved = true;
  // K and V straight into cache storage (Backend::split_qkv's `into`): frame f's rows at
  // kd[f] / vd[f], in the output dtype or, with `direct_f8`, as e4m3 over the frame's scales
  // ds[f] (K's heads, then V's). Frames beyond kMaxDirectFrames take the unfused path.
  static constexpr int kMaxDirectFrames = 16;
  int direct_frames = 0;  // 0: K and V into k and v
  int64_t rows_per_frame = 0;
  bool direct_f8 = false;
  void* kd[kMaxDirectFrames] = {};
  void* vd[kMaxDirectFrames] = {};
  const float* ds[kMaxDirectFrames] = {};
};
// Whether the direct form of split_qkv applies (otherwise split, then store).
bool split_qkv_direct_ok(const SplitQkvArgs& a);
void split_qkv(const SplitQkvArgs& a, cudaStream_t s);

// ---- attention.cu ----------------------------------------------------------------------------
// A segment list as the kernels read it: a device table of start[n + 1] (int64, keys before
// each segment, the total last), then the n K pointers and the n V pointers. Empty segments are
// left out, so every entry holds at least one key.
struct KeyTable {
  const char* dev = nullptr;
  int nseg = 0;
  int64_t keys = 0;
  bool aligned16 = true;          // every K/V pointer 16-byte aligned
  const float* scales = nullptr;  // e4m3 K/V: the per-head scales of every segment (device)
};
// The host bytes of the tables of several lists, one after the other, and each table with its
// byte offset in `dev` (to be rebased once the bytes are on the device).
void build_key_tables(const std::vector<const std::vector<KVSegment>*>& lists,
                      std::vector<char>& bytes, std::vector<KeyTable>& tables);
struct AttentionArgs {
  const void* q = nullptr;  // [nq, heads, dim]
  Elt qkv_t = kBF16;        // dtype of q and of every segment's K/V
  void* out = nullptr;
  Elt out_t = kBF16;
  int nq = 0, heads = 0, dim = 0;
  float scale = 1.f;
  const KeyTable* keys = nullptr;  // on the device for the work queued next
};
void attention(Context& ctx, const AttentionArgs& a);

// ---- image.cu --------------------------------------------------------------------------------
void patchify(const void* img, Elt it, void* rows, Elt rt, int64_t s, int64_t c, int64_t h,
              int64_t w, int p, cudaStream_t st);
// cols[(c, ky, kx), pixel - p0] for output pixels [p0, p1) of one image.
void im2col(const float* x, float* cols, int64_t ci, int64_t hi, int64_t wi, int64_t kh, int64_t kw,
            int stride, int pad, int64_t wo, int64_t p0, int64_t p1, cudaStream_t s);
void add_channel_bias(float* y, const float* bias, int64_t n, int64_t c, int64_t pix,
                      cudaStream_t s);
// tmp[(co, a, b), pixel] -> y[co, yy*k + a, xx*k + b] + bias[co]
void scatter_transpose_conv(const float* tmp, const float* bias, float* y, int64_t co, int k,
                            int64_t hi, int64_t wi, cudaStream_t s);
// y = bilinear resize of x (align_corners), plus add[i % add_n] where `add` is not null.
void upsample_bilinear(const float* x, float* y, int64_t nc, int64_t hi, int64_t wi, int64_t ho,
                       int64_t wo, const float* add, int64_t add_n, cudaStream_t s);
// The same resize of x [images, c, hi, wi] written channels-last in bf16, y [images, ho, wo, c]
// (c a multiple of 32): a convolution's input, each value rounded once. The addend is whole
// [ho, wo] planes (add_n a multiple of ho * wo).
void upsample_channels_last(const float* x, void* y, int64_t images, int64_t c, int64_t hi,
                            int64_t wi, int64_t ho, int64_t wo, const float* add, int64_t add_n,
                            cudaStream_t s);

// ---- conv.cu ---------------------------------------------------------------------------------
// Implicit-GEMM convolution on bf16 tensor cores (inputs rounded to bf16, fp32 accumulation).
struct ConvArgs {
  const float* x = nullptr;     // [images, ci, hi, wi] (or up_h x up_w, below)
  const void* w = nullptr;      // packed by conv_pack_weights
  const float* bias = nullptr;  // [co] or null
  float* y = nullptr;           // [images, co, ho, wo]
  int images = 1, ci = 0, hi = 0, wi = 0, co = 0, ho = 0, wo = 0, kh = 0, kw = 0, stride = 1,
      pad = 0;
  int relu = 0;        // y = relu(conv + bias)
  int accumulate = 0;  // y += conv + bias (not with relu)
  // up_h > 0: the input is the bilinear resize (align_corners) of x [images, ci, up_h, up_w] to
  // hi x wi, plus add[i % add_n] where `add` is not null; it is never written out in F32.
  int up_h = 0, up_w = 0;
  const float* add = nullptr;
  int64_t add_n = 0;
};
// Which convolutions take this path: scratch::conv_packs.
// w[co, ci, kh, kw] f32 -> `packed`, bf16 [co rounded up to 128, kh * kw, ci]
// (scratch::conv_packed_layout_elems values).
void conv_pack_weights(const float* w, void* packed, int64_t co, int64_t ci, int64_t kh, int64_t kw,
                       cudaStream_t s);
// A convolution's tile width and K splits, and the scratch they take: the input channels-last
// in bf16, and the partial sums where K is split; never more than the im2col columns of the same
// convolution (scratch::conv2d_floats). `sms`: the device's multiprocessors, for the tile choice;
// `sm90a`: the device runs the wgmma kernel (layers of input channels a multiple of 64 and more
// than 64 outputs). LINGBOT_CONV_BN=32|64|128|256 forces the output channels per CTA,
// LINGBOT_CONV_SPLITS=n the K splits, LINGBOT_CONV_WGMMA=0 the mma.sync kernel (tests,
// measurements).
struct ConvPlan {
  bool wgmma = false;
  int bn = 64, splits = 1;
  size_t input_bytes = 0, partial_bytes = 0;
  size_t scratch_bytes() const { return input_bytes + partial_bytes; }
};
ConvPlan conv_plan(const ConvArgs& a, int sms, bool sm90a);
void conv2d_bf16(const ConvArgs& a, const ConvPlan& p, void* scratch, cudaStream_t s);

// ---- gemm.cc ---------------------------------------------------------------------------------
// Column-major D[m, n] = op(A)[m, k] . op(B)[k, n] (+ bias[m]) (+ D with `accumulate`) with an
// optional fused ReLU or GELU; fp32 accumulation, no TF32. cuBLASLt's GELU is the tanh form
// (within 4.7e-4 of the erf form): ask for it only where the output's rounding is far coarser.
// Returns false if the fused bias/activation could not be honoured, in which case D holds the
// plain product (plus D) and the caller applies them.
struct GemmArgs {
  bool trans_a = false, trans_b = false;
  int64_t m = 0, n = 0, k = 0;
  const void* a = nullptr;
  int64_t lda = 0;
  const void* b = nullptr;
  int64_t ldb = 0;
  void* d = nullptr;
  int64_t ldd = 0;
  Elt ab_t = kF32, d_t = kF32;
  const void* bias = nullptr;
  Elt bias_t = kF32;
  bool relu = false;
  bool gelu = false;        // tanh form, see above
  bool accumulate = false;  // D += product: C is D, in place
  bool tf32 = false;        // F32 inputs may run on TF32 tensor cores (convolutions, when allowed)
};
bool gemm(Context& ctx, const GemmArgs& g);

// ---- gemv.cu ---------------------------------------------------------------------------------
// Row-major y[m, n] = act(x[m, k] . w[n, k]^T + bias[n]) (+ y with `accumulate`) for m <=
// kGemvMaxRows, bandwidth-bound: w F32 or BF16 (an F32 x into bf16 weights is rounded to bf16
// first, as the GEMM path does), x F32 or BF16, bias and y any float dtype, the activation exact
// (erf GELU). Returns false, having queued nothing, where it does not apply (more rows, k not a
// multiple of 8, pointers not 16-byte aligned, other dtypes).
// With `norm` the input is LayerNorm(x) over each row (weight and bias optional), bit for bit
// what layer_norm() writes, for F32 rows of 1024 or 2048 into bf16 weights only.
constexpr int64_t kGemvMaxRows = 4;
struct RowNorm {
  const void* w = nullptr;
  Elt wt = kF32;
  const void* b = nullptr;
  Elt bt = kF32;
  float eps = 0.f;
};
bool gemv(const void* x, Elt xt, const void* w, Elt wt, const void* bias, Elt bt, void* y, Elt yt,
          int64_t m, int64_t n, int64_t k, Act act, bool accumulate, cudaStream_t s,
          const RowNorm* norm = nullptr);

}  // namespace lingbot::cuda
