#include "backend/cpu/gemm.h"

#include <algorithm>
#include <vector>

#ifdef LINGBOT_HAVE_CBLAS
#include <cblas.h>
#endif

namespace lingbot::cpu {

#ifdef LINGBOT_HAVE_CBLAS

void sgemm(bool trans_a, bool trans_b, int m, int n, int k, float alpha, const float* a, int lda,
           const float* b, int ldb, float beta, float* c, int ldc) {
  if (m == 0 || n == 0) return;
  cblas_sgemm(CblasRowMajor, trans_a ? CblasTrans : CblasNoTrans,
              trans_b ? CblasTrans : CblasNoTrans, m, n, k, alpha, a, lda, b, ldb, beta, c, ldc);
}

const char* blas_name() { return "cblas"; }

#else

// Portable fallback: pack B^T panels so the inner loop is a contiguous dot product.
void sgemm(bool trans_a, bool trans_b, int m, int n, int k, float alpha, const float* a, int lda,
           const float* b, int ldb, float beta, float* c, int ldc) {
  if (m == 0 || n == 0) return;
  // bt[j][p] = op(B)[p][j]
  std::vector<float> bt(static_cast<size_t>(n) * k);
  for (int j = 0; j < n; ++j)
    for (int p = 0; p < k; ++p) bt[static_cast<size_t>(j) * k + p] = trans_b ? b[static_cast<size_t>(j) * ldb + p] : b[static_cast<size_t>(p) * ldb + j];
#pragma omp parallel
  {
    std::vector<float> arow(k);
#pragma omp for schedule(static)
    for (int i = 0; i < m; ++i) {
      for (int p = 0; p < k; ++p) arow[p] = trans_a ? a[static_cast<size_t>(p) * lda + i] : a[static_cast<size_t>(i) * lda + p];
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

const char* blas_name() { return "builtin"; }

#endif

}  // namespace lingbot::cpu
