#include "backend/cpu/gemm.h"

#include <omp.h>

#include <algorithm>
#include <vector>

#ifdef LINGBOT_HAVE_CBLAS
#include <cblas.h>
extern "C" void openblas_set_num_threads(int);
#endif

namespace lingbot::cpu {

#ifdef LINGBOT_HAVE_CBLAS

// OpenBLAS runs single-threaded inside our OpenMP threads: its own pthread pool and OpenMP's
// spinning workers would otherwise fight over the cores. Each thread takes a block of the
// larger output dimension.
void sgemm(bool trans_a, bool trans_b, int m, int n, int k, float alpha, const float* a, int lda,
           const float* b, int ldb, float beta, float* c, int ldc) {
  if (m == 0 || n == 0) return;
  static const bool single = [] {
    openblas_set_num_threads(1);
    return true;
  }();
  (void)single;
  const auto ta = trans_a ? CblasTrans : CblasNoTrans, tb = trans_b ? CblasTrans : CblasNoTrans;
  const int threads = omp_in_parallel() ? 1 : omp_get_max_threads();
  const bool split_m = m >= n;
  const int extent = split_m ? m : n;
  const bool small = static_cast<int64_t>(m) * n * k < (1 << 18);
  const int parts = small ? 1 : std::max(1, std::min(threads, extent / 16));
#pragma omp parallel for num_threads(parts) schedule(static) if (parts > 1)
  for (int part = 0; part < parts; ++part) {
    const int lo = static_cast<int>(static_cast<int64_t>(extent) * part / parts);
    const int hi = static_cast<int>(static_cast<int64_t>(extent) * (part + 1) / parts);
    if (lo == hi) continue;
    if (split_m) {
      const float* as = trans_a ? a + lo : a + static_cast<size_t>(lo) * lda;
      cblas_sgemm(CblasRowMajor, ta, tb, hi - lo, n, k, alpha, as, lda, b, ldb, beta,
                  c + static_cast<size_t>(lo) * ldc, ldc);
    } else {
      const float* bs = trans_b ? b + static_cast<size_t>(lo) * ldb : b + lo;
      cblas_sgemm(CblasRowMajor, ta, tb, m, hi - lo, k, alpha, a, lda, bs, ldb, beta, c + lo, ldc);
    }
  }
}

const char* blas_name() {
  return "cblas";
}

#else

// Portable fallback: pack B^T panels so the inner loop is a contiguous dot product.
void sgemm(bool trans_a, bool trans_b, int m, int n, int k, float alpha, const float* a, int lda,
           const float* b, int ldb, float beta, float* c, int ldc) {
  if (m == 0 || n == 0) return;
  // bt[j][p] = op(B)[p][j]
  std::vector<float> bt(static_cast<size_t>(n) * k);
  for (int j = 0; j < n; ++j)
    for (int p = 0; p < k; ++p)
      bt[static_cast<size_t>(j) * k + p] =
          trans_b ? b[static_cast<size_t>(j) * ldb + p] : b[static_cast<size_t>(p) * ldb + j];
#pragma omp parallel
  {
    std::vector<float> arow(k);
#pragma omp for schedule(static)
    for (int i = 0; i < m; ++i) {
      for (int p = 0; p < k; ++p)
        arow[p] =
            trans_a ? a[static_cast<size_t>(p) * lda + i] : a[static_cast<size_t>(i) * lda + p];
      float* crow = c + static_cast<size_t>(i) * ldc;
      for (int j = 0; j < n; ++j) {
        const float* bj = bt.data() + static_cast<size_t>(j) * k;
        float s = 0.f;
#pragma omp simd reduction(+ : s)
        for (int p = 0; p < k; ++p) s += arow[p] * bj[p];
        crow[j] = alpha * s + (beta == 0.f ? 0.f : beta * crow[j]);
      }
    }
  }
}

const char* blas_name() {
  return "builtin";
}

#endif

}  // namespace lingbot::cpu
