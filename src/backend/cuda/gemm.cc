// GEMMs through cuBLASLt: fp32 accumulation (CUBLAS_COMPUTE_32F, never the TF32 mode), bias,
// ReLU and GELU fused as epilogues, and D += A.B for residual updates (C = D, in place). The
// algorithm is chosen once per problem and cached, because asking the heuristic costs tens of
// microseconds, as much as one of our GEMMs. For large products the heuristic's first choice is
// not always the fastest (at M = 978 and K = 4096 another tiling takes a quarter less time), so its
// candidates are timed once on the call's own operands; only candidates whose every output bit
// equals the first choice's may win, so the results never depend on the timing. Problems
// cuBLASLt declines (odd leading dimensions, unsupported bias types) fall back to cublasGemmEx
// plus the caller's epilogue.
#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <map>
#include <memory>
#include <mutex>
#include <tuple>
#include <vector>

#include "backend/cuda/common.h"

namespace lingbot::cuda {
namespace {

cudaDataType_t cuda_type(Elt t) {
  switch (t) {
    case kF32:
      return CUDA_R_32F;
    case kBF16:
      return CUDA_R_16BF;
    case kF16:
      return CUDA_R_16F;
  }
  return CUDA_R_32F;
}

// Largest power of two (capped at 256) dividing the address: cuBLASLt kernels assume the
// alignment the preference promises, so promise only what the pointers have.
uint32_t alignment(const void* p) {
  const auto v = reinterpret_cast<uintptr_t>(p);
  uint32_t a = 256;
  while (a > 1 && (v % a) != 0) a >>= 1;
  return a;
}

struct Key {
  bool ta, tb;
  int64_t m, n, k, lda, ldb, ldd;
  int ab, d, bias_t;
  int epi;
  uint32_t align_a, align_b, align_d, align_bias;
  bool tf32, accumulate, tune;
  uint64_t workspace;  // the plan's algorithm fits the workspace of the queue it was made for
  auto tie() const {
    return std::tie(ta, tb, m, n, k, lda, ldb, ldd, ab, d, bias_t, epi, align_a, align_b, align_d,
                    align_bias, tf32, accumulate, tune, workspace);
  }
  bool operator<(const Key& o) const { return tie() < o.tie(); }
};

struct LtObjects {
  cublasLtMatmulDesc_t op = nullptr;
  cublasLtMatrixLayout_t a = nullptr, b = nullptr, d = nullptr;
  ~LtObjects() {
    if (d) cublasLtMatrixLayoutDestroy(d);
    if (b) cublasLtMatrixLayoutDestroy(b);
    if (a) cublasLtMatrixLayoutDestroy(a);
    if (op) cublasLtMatmulDescDestroy(op);
  }
};

// A problem's descriptors and algorithm, built once: creating the four descriptors costs
// several microseconds of host time per call, as much as a GEMM's GPU time at M = 978.
struct Plan {
  bool ok = false;
  cublasLtMatmulAlgo_t algo{};
  std::unique_ptr<LtObjects> objs;
};

std::mutex g_plans_mu;
std::map<Key, Plan> g_plans;

bool build(const GemmArgs& g, cublasLtEpilogue_t epi, LtObjects& o) {
  const cublasComputeType_t compute =
      g.tf32 && g.ab_t == kF32 ? CUBLAS_COMPUTE_32F_FAST_TF32 : CUBLAS_COMPUTE_32F;
  if (cublasLtMatmulDescCreate(&o.op, compute, CUDA_R_32F) != CUBLAS_STATUS_SUCCESS) return false;
  const cublasOperation_t ta = g.trans_a ? CUBLAS_OP_T : CUBLAS_OP_N;
  const cublasOperation_t tb = g.trans_b ? CUBLAS_OP_T : CUBLAS_OP_N;
  cublasLtMatmulDescSetAttribute(o.op, CUBLASLT_MATMUL_DESC_TRANSA, &ta, sizeof(ta));
  cublasLtMatmulDescSetAttribute(o.op, CUBLASLT_MATMUL_DESC_TRANSB, &tb, sizeof(tb));
  if (cublasLtMatmulDescSetAttribute(o.op, CUBLASLT_MATMUL_DESC_EPILOGUE, &epi, sizeof(epi)) !=
      CUBLAS_STATUS_SUCCESS)
    return false;
  if (g.bias) {
    const cudaDataType_t bt = cuda_type(g.bias_t);
    if (cublasLtMatmulDescSetAttribute(o.op, CUBLASLT_MATMUL_DESC_BIAS_DATA_TYPE, &bt,
                                       sizeof(bt)) != CUBLAS_STATUS_SUCCESS)
      return false;
    const void* bp = g.bias;
    cublasLtMatmulDescSetAttribute(o.op, CUBLASLT_MATMUL_DESC_BIAS_POINTER, &bp, sizeof(bp));
  }
  const auto ab = cuda_type(g.ab_t), dt = cuda_type(g.d_t);
  const uint64_t ar = g.trans_a ? g.k : g.m, ac = g.trans_a ? g.m : g.k;
  const uint64_t br = g.trans_b ? g.n : g.k, bc = g.trans_b ? g.k : g.n;
  return cublasLtMatrixLayoutCreate(&o.a, ab, ar, ac, g.lda) == CUBLAS_STATUS_SUCCESS &&
         cublasLtMatrixLayoutCreate(&o.b, ab, br, bc, g.ldb) == CUBLAS_STATUS_SUCCESS &&
         cublasLtMatrixLayoutCreate(&o.d, dt, g.m, g.n, g.ldd) == CUBLAS_STATUS_SUCCESS;
}

// The heuristic's candidates for the problem, best first (at most kCandidates).
constexpr int kCandidates = 8;
int find_algos(Context& ctx, const GemmArgs& g, cublasLtEpilogue_t epi, LtObjects& o,
               cublasLtMatmulHeuristicResult_t (&res)[kCandidates], int wanted) {
  if (!build(g, epi, o)) return 0;
  cublasLtMatmulPreference_t pref = nullptr;
  if (cublasLtMatmulPreferenceCreate(&pref) != CUBLAS_STATUS_SUCCESS) return 0;
  const uint64_t ws = ctx.lt_workspace_bytes;
  cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES, &ws,
                                       sizeof(ws));
  const uint32_t aa = alignment(g.a), ab = alignment(g.b), ad = alignment(g.d);
  cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_A_BYTES, &aa,
                                       sizeof(aa));
  cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_B_BYTES, &ab,
                                       sizeof(ab));
  cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_C_BYTES, &ad,
                                       sizeof(ad));
  cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_D_BYTES, &ad,
                                       sizeof(ad));
  int found = 0;
  if (cublasLtMatmulAlgoGetHeuristic(ctx.lt, o.op, o.a, o.b, o.d, o.d, pref, wanted, res, &found) !=
      CUBLAS_STATUS_SUCCESS)
    found = 0;
  cublasLtMatmulPreferenceDestroy(pref);
  // Keep the usable ones, in the heuristic's order.
  int n = 0;
  for (int i = 0; i < found; ++i)
    if (res[i].state == CUBLAS_STATUS_SUCCESS) res[n++] = res[i];
  return n;
}

// Products of at least this many multiply-adds have their candidates timed (the model's token
// GEMMs at M ~ 1000 are 2^30 and more; the heads' small ones are not worth a host wait).
constexpr double kTuneMacs = double(1 << 28);

// LINGBOT_GEMM_TUNE=0 keeps the heuristic's first choice everywhere (looked at when a problem is
// first seen, so that a test can compare both on the same shapes).
bool tuning_wanted(const GemmArgs& g) {
  if (double(g.m) * double(g.n) * double(g.k) < kTuneMacs) return false;
  return switches().gemm_tune;
}

// Timing needs the host to wait for the device, which a recorded step cannot: a problem first
// seen there keeps the first choice.
bool capturing(Context& ctx) {
  cudaStreamCaptureStatus cap = cudaStreamCaptureStatusNone;
  return cudaStreamIsCapturing(ctx.stream, &cap) != cudaSuccess ||
         cap != cudaStreamCaptureStatusNone;
}

size_t elt_bytes(Elt t) {
  return t == kF32 ? 4 : 2;
}

// Runs each candidate on the call's operands into scratch outputs (D copied first where the
// product accumulates into it), drops those whose output differs in any bit from the first
// candidate's, times the rest in interleaved rounds and returns the index of the fastest (0
// unless another is at least 2 % faster). The real D is not touched.
int tune(Context& ctx, const GemmArgs& g, const LtObjects& o,
         const cublasLtMatmulHeuristicResult_t* cand, int n) {
  const size_t bytes = size_t(g.ldd) * size_t(g.n) * elt_bytes(g.d_t);
  cudaStream_t s = ctx.stream;
  void *init = nullptr, *out = nullptr;
  if (cudaMallocAsync(&init, bytes, s) != cudaSuccess ||
      cudaMallocAsync(&out, bytes, s) != cudaSuccess) {
    cudaGetLastError();
    if (init) cudaFreeAsync(init, s);
    return 0;
  }
  if (g.accumulate)
    cudaMemcpyAsync(init, g.d, bytes, cudaMemcpyDeviceToDevice, s);
  else
    cudaMemsetAsync(init, 0, bytes, s);
  const float one = 1.f, beta = g.accumulate ? 1.f : 0.f;
  auto run = [&](int i) {
    return cublasLtMatmul(ctx.lt, o.op, &one, g.a, o.a, g.b, o.b, &beta, out, o.d, out, o.d,
                          &cand[i].algo, ctx.lt_workspace, ctx.lt_workspace_bytes,
                          s) == CUBLAS_STATUS_SUCCESS;
  };
  std::vector<unsigned char> first(bytes), got(bytes);
  std::vector<int> same;
  for (int i = 0; i < n; ++i) {
    cudaMemcpyAsync(out, init, bytes, cudaMemcpyDeviceToDevice, s);
    if (!run(i)) {
      if (i == 0) break;  // nothing to compare the others with
      continue;
    }
    if (cudaMemcpyAsync(got.data(), out, bytes, cudaMemcpyDeviceToHost, s) != cudaSuccess ||
        cudaStreamSynchronize(s) != cudaSuccess)
      break;
    if (i == 0) first = got;
    if (got == first) same.push_back(i);
  }
  int best = 0;
  char chosen[80] = "first kept";
  if (same.size() > 1) {
    constexpr int kRounds = 5, kCalls = 10;
    std::vector<std::vector<float>> times(same.size());
    cudaEvent_t e0 = nullptr, e1 = nullptr;
    cudaEventCreate(&e0);
    cudaEventCreate(&e1);
    for (int r = 0; r < kRounds; ++r)
      for (size_t c = 0; c < same.size(); ++c) {
        cudaEventRecord(e0, s);
        for (int j = 0; j < kCalls; ++j) run(same[c]);
        cudaEventRecord(e1, s);
        float ms = 0.f;
        if (cudaEventSynchronize(e1) == cudaSuccess &&
            cudaEventElapsedTime(&ms, e0, e1) == cudaSuccess)
          times[c].push_back(ms);
      }
    cudaEventDestroy(e0);
    cudaEventDestroy(e1);
    auto median = [](std::vector<float> v) {
      if (v.empty()) return 1e30f;
      std::nth_element(v.begin(), v.begin() + v.size() / 2, v.end());
      return v[v.size() / 2];
    };
    const float t0 = median(times[0]);
    float tb = t0;
    for (size_t c = 1; c < same.size(); ++c) {
      const float t = median(times[c]);
      if (t < 0.98f * t0 && t < tb) {
        tb = t;
        best = same[c];
      }
    }
    std::snprintf(chosen, sizeof(chosen), "first %.2f us, chosen #%d %.2f us", 1000.f * t0 / kCalls,
                  best, 1000.f * tb / kCalls);
  }
  if (verbose_level() >= 1)
    std::fprintf(
        stderr,
        "[lingbot cuda] gemm m=%lld n=%lld k=%lld: %zu of %d candidates bit-identical, %s\n",
        static_cast<long long>(g.m), static_cast<long long>(g.n), static_cast<long long>(g.k),
        same.size(), n, chosen);
  cudaFreeAsync(init, s);
  cudaFreeAsync(out, s);
  cudaGetLastError();  // a candidate's failure is not the caller's error
  return best;
}

bool try_lt(Context& ctx, const GemmArgs& g, cublasLtEpilogue_t epi) {
  Key key{g.trans_a,
          g.trans_b,
          g.m,
          g.n,
          g.k,
          g.lda,
          g.ldb,
          g.ldd,
          g.ab_t,
          g.d_t,
          g.bias ? static_cast<int>(g.bias_t) : -1,
          static_cast<int>(epi),
          alignment(g.a),
          alignment(g.b),
          alignment(g.d),
          g.bias ? alignment(g.bias) : 0u,
          g.tf32,
          g.accumulate,
          tuning_wanted(g),
          ctx.lt_workspace_bytes};
  // One lock over lookup and launch: the cached descriptor's bias pointer changes per call.
  std::lock_guard<std::mutex> lock(g_plans_mu);
  auto it = g_plans.find(key);
  if (it == g_plans.end()) {
    Plan p;
    p.objs = std::make_unique<LtObjects>();
    cublasLtMatmulHeuristicResult_t cand[kCandidates];
    const int n =
        find_algos(ctx, g, epi, *p.objs, cand, key.tune && !capturing(ctx) ? kCandidates : 1);
    p.ok = n > 0;
    if (p.ok)
      p.algo = cand[n > 1 ? tune(ctx, g, *p.objs, cand, n) : 0].algo;
    else
      p.objs.reset();
    if (verbose_level() >= 1) {
      std::fprintf(stderr,
                   "[lingbot cuda] gemm m=%lld n=%lld k=%lld ab=%d d=%d bias=%d epilogue=%d: %s\n",
                   static_cast<long long>(g.m), static_cast<long long>(g.n),
                   static_cast<long long>(g.k), g.ab_t, g.d_t, g.bias ? int(g.bias_t) : -1,
                   static_cast<int>(epi), p.ok ? "cuBLASLt" : "declined by cuBLASLt");
    }
    it = g_plans.emplace(key, std::move(p)).first;
  }
  const Plan& plan = it->second;
  if (!plan.ok) return false;
  const LtObjects& o = *plan.objs;
  if (g.bias) {
    const void* bp = g.bias;
    if (cublasLtMatmulDescSetAttribute(o.op, CUBLASLT_MATMUL_DESC_BIAS_POINTER, &bp, sizeof(bp)) !=
        CUBLAS_STATUS_SUCCESS)
      return false;
  }
  const float one = 1.f, beta = g.accumulate ? 1.f : 0.f;
  return cublasLtMatmul(ctx.lt, o.op, &one, g.a, o.a, g.b, o.b, &beta, g.d, o.d, g.d, o.d,
                        &plan.algo, ctx.lt_workspace, ctx.lt_workspace_bytes,
                        ctx.stream) == CUBLAS_STATUS_SUCCESS;
}

}  // namespace

bool gemm(Context& ctx, const GemmArgs& g) {
  if (g.m <= 0 || g.n <= 0) return true;
  LINGBOT_CHECK(g.k > 0, "gemm: empty reduction dimension");
  LINGBOT_CHECK(!(g.relu && g.gelu), "gemm: ReLU and GELU epilogues together");
  cublasLtEpilogue_t epi = CUBLASLT_EPILOGUE_DEFAULT;
  if (g.bias)
    epi = g.relu   ? CUBLASLT_EPILOGUE_RELU_BIAS
          : g.gelu ? CUBLASLT_EPILOGUE_GELU_BIAS
                   : CUBLASLT_EPILOGUE_BIAS;
  else if (g.relu)
    epi = CUBLASLT_EPILOGUE_RELU;
  else if (g.gelu)
    epi = CUBLASLT_EPILOGUE_GELU;
  if (try_lt(ctx, g, epi)) return true;
  if (epi != CUBLASLT_EPILOGUE_DEFAULT) {
    GemmArgs plain = g;
    plain.bias = nullptr;
    plain.relu = plain.gelu = false;
    if (try_lt(ctx, plain, CUBLASLT_EPILOGUE_DEFAULT)) return false;
  }
  // Last resort: classic cuBLAS, pedantic fp32 math so nothing is silently done in TF32.
  const float one = 1.f, beta = g.accumulate ? 1.f : 0.f;
  LB_CUBLAS(cublasGemmEx(ctx.blas, g.trans_a ? CUBLAS_OP_T : CUBLAS_OP_N,
                         g.trans_b ? CUBLAS_OP_T : CUBLAS_OP_N, static_cast<int>(g.m),
                         static_cast<int>(g.n), static_cast<int>(g.k), &one, g.a, cuda_type(g.ab_t),
                         static_cast<int>(g.lda), g.b, cuda_type(g.ab_t), static_cast<int>(g.ldb),
                         &beta, g.d, cuda_type(g.d_t), static_cast<int>(g.ldd),
                         CUBLAS_COMPUTE_32F_PEDANTIC, CUBLAS_GEMM_DEFAULT));
  return epi == CUBLASLT_EPILOGUE_DEFAULT;
}

}  // namespace lingbot::cuda
