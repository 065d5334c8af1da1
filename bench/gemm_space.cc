// Times cuBLASLt's whole configuration space at the transformer's token GEMMs, not only the
// heuristic's few candidates: every algorithm id, tile, stage count, split-K (1, 2, 3, 4), CTA
// swizzle and cluster shape that cublasLtMatmulAlgoCheck accepts, each run on random operands and
// timed. It answers whether a configuration the heuristic never offers runs these shapes faster,
// e.g. a tiling that fills the multiprocessors better at M = 978 (a 128 x 128 tiling of a
// 1024-wide output would be 64 CTAs on 132). It describes the problems as the engine's gemm.cc
// issues them (keep the two in step); it links cuBLASLt and the runtime only.
// Usage: lingbot_gemm_space [tokens, default 978] [top configurations shown, default 5]
// Output: per problem the heuristic's first choice and the fastest configurations, in us, with
// their largest difference from the first choice's output (split-K sums in another order).
// Tile, stage and cluster ids are cublasLt.h's enum values.
#include <cublasLt.h>
#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <random>
#include <vector>

namespace {

#define CHECK_CUDA(x)                                               \
  do {                                                              \
    cudaError_t e_ = (x);                                           \
    if (e_ != cudaSuccess) {                                        \
      std::fprintf(stderr, "%s: %s\n", #x, cudaGetErrorString(e_)); \
      std::exit(1);                                                 \
    }                                                               \
  } while (0)

// One linear layer y[tokens, out] = x[tokens, in] . w[out, in]^T + bias as the engine issues it:
// column-major D[out x tokens] = op(W)^T . X, bf16 operands, fp32 accumulation.
struct Problem {
  const char* name;
  int out, in;
  bool f32_residual;  // D is the F32 residual stream, accumulated into (beta = 1)
  bool gelu;          // bf16 output with the GELU+bias epilogue
  int per_frame;      // calls per frame: DINO, frame and global blocks, 24 each
};

struct Config {
  cublasLtMatmulAlgo_t algo;
  int id, tile, stages, splitk, swizzle, cluster;
  uint32_t reduction = CUBLASLT_REDUCTION_SCHEME_NONE;
  float us = 0.f, diff = 0.f;
};

template <typename T>
void set_cfg(cublasLtMatmulAlgo_t& a, cublasLtMatmulAlgoConfigAttributes_t at, T v) {
  cublasLtMatmulAlgoConfigSetAttribute(&a, at, &v, sizeof(v));
}

template <typename T>
std::vector<T> cap_list(const cublasLtMatmulAlgo_t& a, cublasLtMatmulAlgoCapAttributes_t at) {
  size_t bytes = 0;
  if (cublasLtMatmulAlgoCapGetAttribute(&a, at, nullptr, 0, &bytes) != CUBLAS_STATUS_SUCCESS ||
      bytes == 0)
    return {};
  std::vector<T> v(bytes / sizeof(T));
  cublasLtMatmulAlgoCapGetAttribute(&a, at, v.data(), bytes, &bytes);
  return v;
}

int cap_int(const cublasLtMatmulAlgo_t& a, cublasLtMatmulAlgoCapAttributes_t at) {
  int32_t v = 0;
  size_t bytes = 0;
  cublasLtMatmulAlgoCapGetAttribute(&a, at, &v, sizeof(v), &bytes);
  return v;
}

void run_problem(cublasLtHandle_t lt, const Problem& p, int tokens, int top, void* ws,
                 size_t ws_bytes) {
  const int m = p.out, n = tokens, k = p.in;
  const cudaDataType_t dt = p.f32_residual ? CUDA_R_32F : CUDA_R_16BF;
  const size_t dbytes = size_t(m) * n * (p.f32_residual ? 4 : 2);
  std::mt19937 rng(7);
  std::normal_distribution<float> nd(0.f, 1.f);
  std::vector<__nv_bfloat16> hw(size_t(m) * k), hx(size_t(n) * k), hb(m);
  for (auto& v : hw) v = __float2bfloat16(nd(rng) / std::sqrt(float(k)));
  for (auto& v : hx) v = __float2bfloat16(nd(rng));
  for (auto& v : hb) v = __float2bfloat16(0.1f * nd(rng));
  std::vector<float> hb32(m);
  for (int i = 0; i < m; ++i) hb32[i] = __bfloat162float(hb[i]);
  void *w, *x, *bias, *d, *d0;
  CHECK_CUDA(cudaMalloc(&w, hw.size() * 2));
  CHECK_CUDA(cudaMalloc(&x, hx.size() * 2));
  CHECK_CUDA(cudaMalloc(&bias, m * 4));
  CHECK_CUDA(cudaMalloc(&d, dbytes));
  CHECK_CUDA(cudaMalloc(&d0, dbytes));
  CHECK_CUDA(cudaMemcpy(w, hw.data(), hw.size() * 2, cudaMemcpyHostToDevice));
  CHECK_CUDA(cudaMemcpy(x, hx.data(), hx.size() * 2, cudaMemcpyHostToDevice));
  if (p.f32_residual)
    CHECK_CUDA(cudaMemcpy(bias, hb32.data(), m * 4, cudaMemcpyHostToDevice));
  else
    CHECK_CUDA(cudaMemcpy(bias, hb.data(), m * 2, cudaMemcpyHostToDevice));
  CHECK_CUDA(cudaMemset(d0, 0, dbytes));

  cublasLtMatmulDesc_t op;
  cublasLtMatmulDescCreate(&op, CUBLAS_COMPUTE_32F, CUDA_R_32F);
  const cublasOperation_t T = CUBLAS_OP_T, N = CUBLAS_OP_N;
  cublasLtMatmulDescSetAttribute(op, CUBLASLT_MATMUL_DESC_TRANSA, &T, sizeof(T));
  cublasLtMatmulDescSetAttribute(op, CUBLASLT_MATMUL_DESC_TRANSB, &N, sizeof(N));
  const cublasLtEpilogue_t epi = p.gelu ? CUBLASLT_EPILOGUE_GELU_BIAS : CUBLASLT_EPILOGUE_BIAS;
  cublasLtMatmulDescSetAttribute(op, CUBLASLT_MATMUL_DESC_EPILOGUE, &epi, sizeof(epi));
  cublasLtMatmulDescSetAttribute(op, CUBLASLT_MATMUL_DESC_BIAS_DATA_TYPE, &dt, sizeof(dt));
  cublasLtMatmulDescSetAttribute(op, CUBLASLT_MATMUL_DESC_BIAS_POINTER, &bias, sizeof(bias));
  cublasLtMatrixLayout_t la, lb, ld;
  cublasLtMatrixLayoutCreate(&la, CUDA_R_16BF, k, m, k);
  cublasLtMatrixLayoutCreate(&lb, CUDA_R_16BF, k, n, k);
  cublasLtMatrixLayoutCreate(&ld, dt, m, n, m);
  const float one = 1.f, beta = p.f32_residual ? 1.f : 0.f;

  auto run = [&](const cublasLtMatmulAlgo_t& a) {
    return cublasLtMatmul(lt, op, &one, w, la, x, lb, &beta, d, ld, d, ld, &a, ws, ws_bytes,
                          nullptr) == CUBLAS_STATUS_SUCCESS;
  };
  // One call from the same initial D, copied back to the host as floats.
  auto output = [&](const cublasLtMatmulAlgo_t& a, std::vector<float>& out) {
    CHECK_CUDA(cudaMemcpy(d, d0, dbytes, cudaMemcpyDeviceToDevice));
    if (!run(a)) return false;
    if (cudaDeviceSynchronize() != cudaSuccess) {
      cudaGetLastError();
      return false;
    }
    out.resize(size_t(m) * n);
    if (p.f32_residual) {
      CHECK_CUDA(cudaMemcpy(out.data(), d, dbytes, cudaMemcpyDeviceToHost));
    } else {
      std::vector<__nv_bfloat16> h(size_t(m) * n);
      CHECK_CUDA(cudaMemcpy(h.data(), d, dbytes, cudaMemcpyDeviceToHost));
      for (size_t i = 0; i < h.size(); ++i) out[i] = __bfloat162float(h[i]);
    }
    return true;
  };
  cudaEvent_t e0, e1;
  cudaEventCreate(&e0);
  cudaEventCreate(&e1);
  // Median over rounds of `calls` back-to-back calls, in us per call.
  auto time = [&](const cublasLtMatmulAlgo_t& a, int rounds, int calls) {
    std::vector<float> t;
    for (int r = 0; r < rounds; ++r) {
      cudaEventRecord(e0);
      for (int c = 0; c < calls; ++c) run(a);
      cudaEventRecord(e1);
      cudaEventSynchronize(e1);
      float ms = 0.f;
      cudaEventElapsedTime(&ms, e0, e1);
      t.push_back(1000.f * ms / calls);
    }
    std::nth_element(t.begin(), t.begin() + t.size() / 2, t.end());
    return t[t.size() / 2];
  };

  // The heuristic's first choice, the reference for time and output.
  cublasLtMatmulPreference_t pref;
  cublasLtMatmulPreferenceCreate(&pref);
  cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES, &ws_bytes,
                                       sizeof(ws_bytes));
  cublasLtMatmulHeuristicResult_t first{};
  int found = 0;
  cublasLtMatmulAlgoGetHeuristic(lt, op, la, lb, ld, ld, pref, 1, &first, &found);
  cublasLtMatmulPreferenceDestroy(pref);
  std::vector<float> want, got;
  if (found < 1 || !output(first.algo, want)) {
    std::printf("%s: no heuristic result\n", p.name);
    return;
  }
  const float t_first = time(first.algo, 9, 20);

  // Every configuration cuBLASLt accepts for this problem.
  int ids[256], nids = 0;
  cublasLtMatmulAlgoGetIds(lt, CUBLAS_COMPUTE_32F, CUDA_R_32F, CUDA_R_16BF, CUDA_R_16BF, dt, dt,
                           256, ids, &nids);
  std::vector<Config> ok;
  long checked = 0;
  for (int i = 0; i < nids; ++i) {
    cublasLtMatmulAlgo_t base;
    if (cublasLtMatmulAlgoInit(lt, CUBLAS_COMPUTE_32F, CUDA_R_32F, CUDA_R_16BF, CUDA_R_16BF, dt, dt,
                               ids[i], &base) != CUBLAS_STATUS_SUCCESS)
      continue;
    auto tiles = cap_list<uint32_t>(base, CUBLASLT_ALGO_CAP_TILE_IDS);
    auto stages = cap_list<uint32_t>(base, CUBLASLT_ALGO_CAP_STAGES_IDS);
    if (tiles.empty()) tiles = {CUBLASLT_MATMUL_TILE_UNDEFINED};
    if (stages.empty()) stages = {CUBLASLT_MATMUL_STAGES_UNDEFINED};
    const bool splitk = cap_int(base, CUBLASLT_ALGO_CAP_SPLITK_SUPPORT) != 0;
    const int swizzle_max = cap_int(base, CUBLASLT_ALGO_CAP_CTA_SWIZZLING_SUPPORT) ? 1 : 0;
    const uint32_t schemes = cap_int(base, CUBLASLT_ALGO_CAP_REDUCTION_SCHEME_MASK);
    // Tiles and stage counts first with the other settings at their defaults; only the pairs
    // accepted there are tried with split-K, swizzle and cluster shapes.
    auto check = [&](Config& c) {
      set_cfg(c.algo, CUBLASLT_ALGO_CONFIG_TILE_ID, uint32_t(c.tile));
      set_cfg(c.algo, CUBLASLT_ALGO_CONFIG_STAGES_ID, uint32_t(c.stages));
      set_cfg(c.algo, CUBLASLT_ALGO_CONFIG_SPLITK_NUM, int32_t(c.splitk));
      set_cfg(c.algo, CUBLASLT_ALGO_CONFIG_CTA_SWIZZLING, uint32_t(c.swizzle));
      set_cfg(c.algo, CUBLASLT_ALGO_CONFIG_CLUSTER_SHAPE_ID, uint16_t(c.cluster));
      set_cfg(c.algo, CUBLASLT_ALGO_CONFIG_REDUCTION_SCHEME, c.reduction);
      cublasLtMatmulHeuristicResult_t r{};
      ++checked;
      return cublasLtMatmulAlgoCheck(lt, op, la, lb, ld, ld, &c.algo, &r) ==
                 CUBLAS_STATUS_SUCCESS &&
             r.workspaceSize <= ws_bytes;
    };
    const int clusters[] = {CUBLASLT_CLUSTER_SHAPE_AUTO, CUBLASLT_CLUSTER_SHAPE_1x1x1,
                            CUBLASLT_CLUSTER_SHAPE_2x1x1, CUBLASLT_CLUSTER_SHAPE_1x2x1};
    for (uint32_t tile : tiles)
      for (uint32_t st : stages) {
        bool any = false;  // sm90 kernels take no AUTO cluster shape, older ones only AUTO
        for (int cl : clusters) {
          Config c0{base, ids[i], int(tile), int(st), 1, 0, cl};
          if ((any = check(c0))) break;
        }
        if (!any) continue;
        for (int sk = 1; sk <= (splitk ? 4 : 1); ++sk)
          for (int sw = 0; sw <= swizzle_max; ++sw)
            for (int cl : clusters)
              for (uint32_t red :
                   {CUBLASLT_REDUCTION_SCHEME_NONE, CUBLASLT_REDUCTION_SCHEME_INPLACE,
                    CUBLASLT_REDUCTION_SCHEME_COMPUTE_TYPE,
                    CUBLASLT_REDUCTION_SCHEME_OUTPUT_TYPE}) {
                // No reduction scheme without a split; a split with each scheme it has.
                if ((sk == 1) != (red == CUBLASLT_REDUCTION_SCHEME_NONE)) continue;
                if (sk > 1 && !(schemes & red)) continue;
                Config c{base, ids[i], int(tile), int(st), sk, sw, cl, red};
                if (check(c)) ok.push_back(c);
              }
      }
  }
  // A quick timing of each, then a careful one of the fastest.
  std::vector<Config> timed;
  for (auto& c : ok) {
    if (!run(c.algo) || cudaDeviceSynchronize() != cudaSuccess) {
      cudaGetLastError();
      continue;
    }
    c.us = time(c.algo, 1, 5);
    timed.push_back(c);
  }
  std::sort(timed.begin(), timed.end(), [](auto& a, auto& b) { return a.us < b.us; });
  timed.resize(std::min<size_t>(timed.size(), 4 * top));
  for (auto& c : timed) {
    c.us = time(c.algo, 9, 20);
    c.diff = -1.f;
    if (output(c.algo, got)) {
      c.diff = 0.f;
      for (size_t i = 0; i < got.size(); ++i)
        c.diff = std::max(c.diff, std::fabs(got[i] - want[i]) / (1.f + std::fabs(want[i])));
    }
  }
  std::sort(timed.begin(), timed.end(), [](auto& a, auto& b) { return a.us < b.us; });
  int32_t fid = 0, ftile = 0;
  cublasLtMatmulAlgoConfigGetAttribute(&first.algo, CUBLASLT_ALGO_CONFIG_ID, &fid, sizeof(fid),
                                       nullptr);
  cublasLtMatmulAlgoConfigGetAttribute(&first.algo, CUBLASLT_ALGO_CONFIG_TILE_ID, &ftile,
                                       sizeof(ftile), nullptr);
  const double flop = 2.0 * m * n * k;
  std::printf(
      "%s (out %d, in %d, tokens %d, %d calls a frame): %ld configurations checked, %zu "
      "accepted; heuristic first (algo %d, tile %d) %.2f us, %.0f TFLOP/s\n",
      p.name, m, k, n, p.per_frame, checked, ok.size(), fid, ftile, t_first, flop / t_first * 1e-6);
  for (int i = 0; i < top && i < int(timed.size()); ++i) {
    const auto& c = timed[i];
    std::printf(
        "  algo %3d tile %3d stages %3d splitk %d (reduction %u) swizzle %d cluster %2d: %.2f us "
        "(%.0f TFLOP/s, %+.1f %%), max rel diff %.2e\n",
        c.id, c.tile, c.stages, c.splitk, c.reduction, c.swizzle, c.cluster, c.us,
        flop / c.us * 1e-6, 100.0 * (c.us / t_first - 1.0), c.diff);
  }
  if (!timed.empty())
    std::printf("  a frame: %.3f ms -> %.3f ms\n", p.per_frame * t_first * 1e-3,
                p.per_frame * timed[0].us * 1e-3);
  cudaEventDestroy(e0);
  cudaEventDestroy(e1);
  cublasLtMatrixLayoutDestroy(la);
  cublasLtMatrixLayoutDestroy(lb);
  cublasLtMatrixLayoutDestroy(ld);
  cublasLtMatmulDescDestroy(op);
  cudaFree(w);
  cudaFree(x);
  cudaFree(bias);
  cudaFree(d);
  cudaFree(d0);
}

}  // namespace

int main(int argc, char** argv) {
  const int tokens = argc > 1 ? std::atoi(argv[1]) : 978;
  const int top = argc > 2 ? std::atoi(argv[2]) : 5;
  if (tokens <= 0 || top <= 0) {
    std::fprintf(stderr, "usage: lingbot_gemm_space [tokens] [top]\n");
    return 2;
  }
  cublasLtHandle_t lt;
  if (cublasLtCreate(&lt) != CUBLAS_STATUS_SUCCESS) {
    std::fprintf(stderr, "lingbot_gemm_space: no cuBLASLt (no GPU?)\n");
    return 1;
  }
  const size_t ws_bytes = size_t(32) << 20;  // the engine's cuBLASLt workspace
  void* ws = nullptr;
  CHECK_CUDA(cudaMalloc(&ws, ws_bytes));
  const Problem problems[] = {{"qkv", 3072, 1024, false, false, 72},
                              {"projection", 1024, 1024, true, false, 72},
                              {"fc1", 4096, 1024, false, true, 72},
                              {"fc2", 1024, 4096, true, false, 72}};
  for (const auto& p : problems) run_problem(lt, p, tokens, top, ws, ws_bytes);
  cudaFree(ws);
  cublasLtDestroy(lt);
  return 0;
}
