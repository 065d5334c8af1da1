// CPU reference backend: float32 everywhere, OpenMP threads, BLAS for the matrix products.
#include <omp.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <vector>

#include "backend/cpu/attention.h"
#include "backend/cpu/gemm.h"
#include "backend/ops.h"

namespace lingbot {
namespace {

// Below this many elements an op runs on one thread: waking the team costs more.
constexpr int64_t kParallelWork = 1 << 15;

inline float act_apply(float x, Act a) {
  switch (a) {
    case Act::None:
      return x;
    case Act::GELU:
      return 0.5f * x * (1.0f + std::erf(x * 0.70710678118654752f));
    case Act::ReLU:
      return x > 0.f ? x : 0.f;
    case Act::SiLU:
      return x / (1.0f + std::exp(-x));
    case Act::Exp:
      return std::exp(x);
    case Act::ExpP1:
      return 1.0f + std::exp(x);
  }
  return x;
}

// Normalizes one row of n values (double accumulation) into `out`.
inline void layer_norm_row(const float* x, int64_t n, const float* w, const float* b, float eps,
                           float* out) {
  double mean = 0;
  for (int64_t i = 0; i < n; ++i) mean += x[i];
  mean /= n;
  double var = 0;
  for (int64_t i = 0; i < n; ++i) var += (x[i] - mean) * (x[i] - mean);
  var /= n;
  const float m = static_cast<float>(mean);
  const float r = static_cast<float>(1.0 / std::sqrt(var + eps));
  for (int64_t i = 0; i < n; ++i) {
    float y = (x[i] - m) * r;
    if (w) y *= w[i];
    if (b) y += b[i];
    out[i] = y;
  }
}

class CpuBackend final : public Backend {
 public:
  explicit CpuBackend(int threads) : threads_(threads) { use_on_this_thread(); }
  // OpenMP's thread count is a setting of each thread: one that only the creating thread had
  // would leave every other thread pushing a session (a server's stream workers) with one
  // OpenMP thread per core, however many were asked for.
  void use_on_this_thread() const override {
    if (threads_ > 0 && omp_get_max_threads() != threads_) omp_set_num_threads(threads_);
  }
  Device device() const override { return Device::CPU; }
  std::string name() const override { return std::string("cpu (") + cpu::blas_name() + ")"; }

  Tensor alloc(const Shape& shape, DType dtype) override { return Tensor::zeros(shape, dtype); }
  Tensor upload(const Tensor& host, DType dtype) override {
    return host.dtype() == dtype ? host : host.to(dtype);
  }
  Tensor download(const Tensor& t) override {
    return t.dtype() == DType::F32 ? t : t.to(DType::F32);
  }

 protected:
  bool handles(DType t) const override { return t == DType::F32; }

  void do_copy(const Tensor& src, Tensor& dst) override {
    if (src.dtype() == dst.dtype()) {
      std::memmove(dst.raw(), src.raw(), src.nbytes());
    } else {
      Tensor c = src.to(dst.dtype());
      std::memcpy(dst.raw(), c.raw(), c.nbytes());
    }
  }
  void do_fill(Tensor& t, float value) override { std::fill_n(t.f32(), t.numel(), value); }
  void do_copy_ranges(const std::vector<ByteRange>& ranges) override {
    for (const ByteRange& r : ranges) std::memcpy(r.dst, r.src, r.bytes);
  }

  void do_linear(const Tensor& x, const Tensor& w, const Tensor* b, Tensor& y, Act act) override {
    const int64_t k = w.dim(1), n = w.dim(0), m = x.numel() / k;
    cpu::sgemm(false, true, m, n, k, 1.f, x.f32(), k, w.f32(), k, 0.f, y.f32(), n);
    const float* bias = b ? b->f32() : nullptr;
    if (!bias && act == Act::None) return;
    float* out = y.f32();
#pragma omp parallel for schedule(static) if (m * n > kParallelWork)
    for (int64_t i = 0; i < m; ++i) {
      float* row = out + i * n;
      for (int64_t j = 0; j < n; ++j) row[j] = act_apply(bias ? row[j] + bias[j] : row[j], act);
    }
  }

  void do_linear_add(const Tensor& x, const Tensor& w, const Tensor* b, Tensor& y) override {
    const int64_t k = w.dim(1), n = w.dim(0), m = x.numel() / k;
    if (b) {
      float* out = y.f32();
      const float* bias = b->f32();
#pragma omp parallel for schedule(static) if (m * n > kParallelWork)
      for (int64_t i = 0; i < m; ++i)
        for (int64_t j = 0; j < n; ++j) out[i * n + j] += bias[j];
    }
    cpu::sgemm(false, true, m, n, k, 1.f, x.f32(), k, w.f32(), k, 1.f, y.f32(), n);
  }

  void do_layer_norm(const Tensor& x, const Tensor* w, const Tensor* b, float eps,
                     Tensor& y) override {
    const int64_t n = x.dim(-1), rows = x.numel() / n;
    const float* wp = w ? w->f32() : nullptr;
    const float* bp = b ? b->f32() : nullptr;
    const float* xp = x.f32();
    float* yp = y.f32();
#pragma omp parallel for schedule(static) if (rows * n > kParallelWork)
    for (int64_t r = 0; r < rows; ++r) layer_norm_row(xp + r * n, n, wp, bp, eps, yp + r * n);
  }

  void do_add(Tensor& x, const Tensor& y, const Tensor* gamma, float alpha) override {
    const int64_t n = x.numel(), ny = y.numel(), c = x.dim(-1);
    float* xp = x.f32();
    const float* yp = y.f32();
    const float* g = gamma ? gamma->f32() : nullptr;
#pragma omp parallel for schedule(static) if (n > kParallelWork)
    for (int64_t i = 0; i < n; ++i) {
      float v = yp[i % ny];
      if (g) v *= g[i % c];
      xp[i] += alpha == 1.f ? v : alpha * v;
    }
  }

  void do_activate(Tensor& x, Act act) override {
    float* p = x.f32();
    const int64_t n = x.numel();
#pragma omp parallel for schedule(static) if (n > kParallelWork)
    for (int64_t i = 0; i < n; ++i) p[i] = act_apply(p[i], act);
  }

  void do_concat_last(const Tensor& a, const Tensor& b, Tensor& y) override {
    const int64_t ca = a.dim(-1), cb = b.dim(-1), m = a.numel() / ca;
    const float *ap = a.f32(), *bp = b.f32();
    float* yp = y.f32();
#pragma omp parallel for schedule(static) if (y.numel() > kParallelWork)
    for (int64_t i = 0; i < m; ++i) {
      std::memcpy(yp + i * (ca + cb), ap + i * ca, ca * 4);
      std::memcpy(yp + i * (ca + cb) + ca, bp + i * cb, cb * 4);
    }
  }

  void do_transpose_last2(const Tensor& x, Tensor& y) override {
    const int64_t c = x.dim(-1), r = x.dim(-2), batch = x.numel() / (r * c);
    const float* xp = x.f32();
    float* yp = y.f32();
#pragma omp parallel for collapse(2) schedule(static) if (x.numel() > kParallelWork)
    for (int64_t bi = 0; bi < batch; ++bi)
      for (int64_t j = 0; j < c; ++j)
        for (int64_t i = 0; i < r; ++i) yp[(bi * c + j) * r + i] = xp[(bi * r + i) * c + j];
  }

  void do_split_qkv(const Tensor& qkv, const QKNorm* norm, const Rope* rope, Tensor& q, Tensor& k,
                    Tensor& v) override {
    const int64_t h = q.dim(-2), d = q.dim(-1), m = q.numel() / (h * d);
    const float* src = qkv.f32();
    float *qp = q.f32(), *kp = k.f32(), *vp = v.f32();
    const int64_t half = d / 2, quarter = d / 4;
#pragma omp parallel for schedule(static) if (qkv.numel() > kParallelWork)
    for (int64_t i = 0; i < m; ++i) {
      const float* row = src + i * 3 * h * d;
      std::memcpy(vp + i * h * d, row + 2 * h * d, h * d * 4);
      for (int which = 0; which < 2; ++which) {
        float* dst = (which == 0 ? qp : kp) + i * h * d;
        const float* in = row + which * h * d;
        for (int64_t hh = 0; hh < h; ++hh) {
          float* x = dst + hh * d;
          if (norm) {
            const Tensor* w = which == 0 ? norm->q_weight : norm->k_weight;
            const Tensor* b = which == 0 ? norm->q_bias : norm->k_bias;
            layer_norm_row(in + hh * d, d, w ? w->f32() : nullptr, b ? b->f32() : nullptr,
                           norm->eps, x);
          } else {
            std::memcpy(x, in + hh * d, d * 4);
          }
          if (!rope) continue;
          const float* cs = rope->cos.f32() + i * half;
          const float* sn = rope->sin.f32() + i * half;
          for (int64_t p = 0; p < half; ++p) {
            int64_t i0, i1;
            if (rope->pairs == RopePairs::Interleaved) {
              i0 = 2 * p;
              i1 = 2 * p + 1;
            } else {
              const int64_t hf = p / quarter, j = p % quarter;
              i0 = hf * half + j;
              i1 = i0 + quarter;
            }
            const float x0 = x[i0], x1 = x[i1];
            x[i0] = x0 * cs[p] - x1 * sn[p];
            x[i1] = x0 * sn[p] + x1 * cs[p];
          }
        }
      }
    }
  }

  void do_attention(const Tensor& q, const std::vector<KVSegment>& kv, float scale,
                    Tensor& out) override {
    const int64_t h = q.dim(-2), d = q.dim(-1), nq = q.numel() / (h * d);
    cpu::attention(q.f32(), nq, h, d, kv, scale, out.f32());
  }

  void do_store_kv(const Tensor& k, const Tensor& v, void* k_dst, void* v_dst, DType dtype,
                   const Tensor* scales) override {
    if (!scales) {  // F32 rows, or e4m3 rows moving within the cache
      std::memcpy(k_dst, k.raw(), k.nbytes());
      std::memcpy(v_dst, v.raw(), v.nbytes());
      return;
    }
    const int64_t h = k.dim(-2), d = k.dim(-1), rows = k.numel() / (h * d);
    const float* sc = scales->f32();
    for (int which = 0; which < 2; ++which) {
      const float* src = (which == 0 ? k : v).f32();
      auto* dst = static_cast<uint8_t*>(which == 0 ? k_dst : v_dst);
#pragma omp parallel for schedule(static) if (rows * h * d > kParallelWork)
      for (int64_t r = 0; r < rows; ++r)
        for (int64_t hh = 0; hh < h; ++hh) {
          const float s = sc[which * h + hh];
          for (int64_t e = 0; e < d; ++e) {
            const int64_t i = (r * h + hh) * d + e;
            dst[i] = f32_to_f8e4m3(src[i] / s);
          }
        }
    }
  }

  void do_fp8_kv_scales(const Tensor& k, const Tensor& v, Tensor& scales) override {
    const int64_t h = k.dim(-2), d = k.dim(-1), rows = k.numel() / (h * d);
    for (int which = 0; which < 2; ++which) {
      const float* src = (which == 0 ? k : v).f32();
      for (int64_t hh = 0; hh < h; ++hh) {
        float amax = 0.f;
        for (int64_t r = 0; r < rows; ++r)
          for (int64_t e = 0; e < d; ++e)
            amax = std::max(amax, std::fabs(src[(r * h + hh) * d + e]));
        scales.f32()[which * h + hh] = fp8_scale(amax);
      }
    }
  }

  void do_patchify(const Tensor& img, int p, Tensor& rows) override {
    const int64_t s = img.dim(0), c = img.dim(1), hh = img.dim(2), ww = img.dim(3);
    const int64_t gh = hh / p, gw = ww / p, kdim = c * p * p;
    const float* x = img.f32();
    float* r = rows.f32();
#pragma omp parallel for collapse(2) schedule(static) if (rows.numel() > kParallelWork)
    for (int64_t f = 0; f < s; ++f)
      for (int64_t y = 0; y < gh; ++y)
        for (int64_t xg = 0; xg < gw; ++xg) {
          float* row = r + ((f * gh + y) * gw + xg) * kdim;
          for (int64_t ch = 0; ch < c; ++ch)
            for (int ky = 0; ky < p; ++ky)
              std::memcpy(row + (ch * p + ky) * p,
                          x + ((f * c + ch) * hh + y * p + ky) * ww + xg * p, p * 4);
        }
  }

  void do_conv2d(const Tensor& x, const Tensor& w, const Tensor* b, int stride, int pad, Tensor& y,
                 Act act, bool accumulate) override {
    const int64_t n = x.dim(0), ci = x.dim(1), hi = x.dim(2), wi = x.dim(3);
    const int64_t co = w.dim(0), kh = w.dim(2), kw = w.dim(3);
    const int64_t ho = y.dim(2), wo = y.dim(3);
    const int64_t kdim = ci * kh * kw, npix = ho * wo;
    std::vector<float> cols;
    const bool pointwise = kh == 1 && kw == 1 && stride == 1 && pad == 0;
    if (!pointwise) cols.resize(static_cast<size_t>(kdim) * npix);
    for (int64_t img = 0; img < n; ++img) {
      const float* xp = x.f32() + img * ci * hi * wi;
      float* yp = y.f32() + img * co * npix;
      const float* colp = xp;
      if (!pointwise) {
#pragma omp parallel for collapse(2) schedule(static) if (kdim * npix > kParallelWork)
        for (int64_t c = 0; c < ci; ++c)
          for (int64_t ky = 0; ky < kh; ++ky)
            for (int64_t kx = 0; kx < kw; ++kx) {
              float* dst = cols.data() + ((c * kh + ky) * kw + kx) * npix;
              for (int64_t oy = 0; oy < ho; ++oy) {
                const int64_t iy = oy * stride - pad + ky;
                for (int64_t ox = 0; ox < wo; ++ox) {
                  const int64_t ix = ox * stride - pad + kx;
                  dst[oy * wo + ox] = (iy >= 0 && iy < hi && ix >= 0 && ix < wi)
                                          ? xp[(c * hi + iy) * wi + ix]
                                          : 0.f;
                }
              }
            }
        colp = cols.data();
      }
      cpu::sgemm(false, false, co, npix, kdim, 1.f, w.f32(), kdim, colp, npix,
                 accumulate ? 1.f : 0.f, yp, npix);
      if (b || act == Act::ReLU) {
        const float* bp = b ? b->f32() : nullptr;
        const bool relu = act == Act::ReLU;
#pragma omp parallel for schedule(static) if (co * npix > kParallelWork)
        for (int64_t c = 0; c < co; ++c)
          for (int64_t i = 0; i < npix; ++i) {
            float v = yp[c * npix + i] + (bp ? bp[c] : 0.f);
            yp[c * npix + i] = relu ? std::max(v, 0.f) : v;
          }
      }
    }
  }

  void do_conv_transpose2d(const Tensor& x, const Tensor& w, const Tensor* b, int stride,
                           Tensor& y) override {
    const int64_t n = x.dim(0), ci = x.dim(1), hi = x.dim(2), wi = x.dim(3);
    const int64_t co = w.dim(1), k = w.dim(2);
    // out[(co,a,b), pix] = sum_ci W[ci, (co,a,b)] * x[ci, pix]
    const int64_t npix = hi * wi, rows = co * k * k;
    std::vector<float> tmp(static_cast<size_t>(rows) * npix);
    for (int64_t img = 0; img < n; ++img) {
      cpu::sgemm(true, false, rows, npix, ci, 1.f, w.f32(), rows, x.f32() + img * ci * npix, npix,
                 0.f, tmp.data(), npix);
      float* yp = y.f32() + img * co * npix * k * k;
      const float* bp = b ? b->f32() : nullptr;
#pragma omp parallel for schedule(static) if (co * npix * k * k > kParallelWork)
      for (int64_t c = 0; c < co; ++c)
        for (int64_t a = 0; a < k; ++a)
          for (int64_t bb = 0; bb < k; ++bb) {
            const float* src = tmp.data() + ((c * k + a) * k + bb) * npix;
            for (int64_t yy = 0; yy < hi; ++yy)
              for (int64_t xx = 0; xx < wi; ++xx)
                yp[(c * hi * k + yy * k + a) * wi * k + xx * k + bb] =
                    src[yy * wi + xx] + (bp ? bp[c] : 0.f);
          }
    }
  }

  void do_upsample_bilinear(const Tensor& x, Tensor& y, const Tensor* add) override {
    const int64_t nc = x.dim(0) * x.dim(1), hi = x.dim(2), wi = x.dim(3);
    const int64_t ho = y.dim(2), wo = y.dim(3);
    // align_corners: src = o * (in-1)/(out-1), the scale formed in float as PyTorch does.
    const float sh = ho > 1 ? static_cast<float>(hi - 1) / static_cast<float>(ho - 1) : 0.f;
    const float sw = wo > 1 ? static_cast<float>(wi - 1) / static_cast<float>(wo - 1) : 0.f;
    std::vector<int64_t> x0(wo), x1(wo);
    std::vector<float> lx(wo);
    for (int64_t o = 0; o < wo; ++o) {
      const float src = sw * static_cast<float>(o);
      x0[o] = static_cast<int64_t>(src);
      x1[o] = x0[o] + (x0[o] < wi - 1 ? 1 : 0);
      lx[o] = src - static_cast<float>(x0[o]);
    }
    const float* xp = x.f32();
    float* yp = y.f32();
#pragma omp parallel for collapse(2) schedule(static) if (y.numel() > kParallelWork)
    for (int64_t c = 0; c < nc; ++c)
      for (int64_t oy = 0; oy < ho; ++oy) {
        const float src = sh * static_cast<float>(oy);
        const int64_t y0 = static_cast<int64_t>(src), y1 = y0 + (y0 < hi - 1 ? 1 : 0);
        const float l1 = src - static_cast<float>(y0), l0 = 1.f - l1;
        const float* r0 = xp + (c * hi + y0) * wi;
        const float* r1 = xp + (c * hi + y1) * wi;
        float* out = yp + (c * ho + oy) * wo;
        for (int64_t ox = 0; ox < wo; ++ox) {
          const float w1 = lx[ox], w0 = 1.f - w1;
          out[ox] =
              l0 * (w0 * r0[x0[ox]] + w1 * r0[x1[ox]]) + l1 * (w0 * r1[x0[ox]] + w1 * r1[x1[ox]]);
        }
      }
    if (add) do_add(y, *add, nullptr, 1.f);
  }

 private:
  int threads_;  // 0: OpenMP's default (all cores)
};

}  // namespace

std::unique_ptr<Backend> make_cpu_backend(int threads) {
  return std::make_unique<CpuBackend>(threads);
}

}  // namespace lingbot
