// The sizes each model part reports for the memory preflight are what it really allocates: the
// parts run on a backend that counts the device memory it hands out.
#include <gtest/gtest.h>

#include <memory>

#include "backend/ops.h"
#include "cache/paged_kv.h"
#include "model/model.h"
#include "stream/sequence.h"

namespace lingbot {
namespace {

// The CPU backend, counting the bytes of every tensor it allocates or uploads.
class CountingBackend final : public Backend {
 public:
  CountingBackend() : cpu_(make_cpu_backend(1)) {}
  size_t bytes = 0;

  Device device() const override { return cpu_->device(); }
  std::string name() const override { return "counting " + cpu_->name(); }
  Tensor alloc(const Shape& shape, DType dtype) override {
    bytes += static_cast<size_t>(shape_numel(shape)) * dtype_size(dtype);
    return cpu_->alloc(shape, dtype);
  }
  Tensor upload(const Tensor& host, DType dtype) override {
    bytes += static_cast<size_t>(host.numel()) * dtype_size(dtype);
    // A copy, as a device upload is: the CPU backend would share the host tensor.
    Tensor t = cpu_->alloc(host.shape(), dtype);
    cpu_->copy(host, t);
    return t;
  }
  Tensor download(const Tensor& t) override { return cpu_->download(t); }

 protected:
  bool handles(DType t) const override { return t == DType::F32; }
  void do_copy(const Tensor& s, Tensor& d) override { cpu_->copy(s, d); }
  void do_fill(Tensor& t, float v) override { cpu_->fill(t, v); }
  void do_copy_ranges(const std::vector<ByteRange>& r) override { cpu_->copy_ranges(r); }
  void do_linear(const Tensor& x, const Tensor& w, const Tensor* b, Tensor& y, Act a) override {
    cpu_->linear(x, w, b, y, a);
  }
  void do_linear_add(const Tensor& x, const Tensor& w, const Tensor* b, Tensor& y) override {
    cpu_->linear_add(x, w, b, y);
  }
  void do_layer_norm(const Tensor& x, const Tensor* w, const Tensor* b, float eps,
                     Tensor& y) override {
    cpu_->layer_norm(x, w, b, eps, y);
  }
  void do_add(Tensor& x, const Tensor& y, const Tensor* g, float alpha) override {
    cpu_->add(x, y, g, alpha);
  }
  void do_activate(Tensor& x, Act a) override { cpu_->activate(x, a); }
  void do_concat_last(const Tensor& a, const Tensor& b, Tensor& y) override {
    cpu_->concat_last(a, b, y);
  }
  void do_transpose_last2(const Tensor& x, Tensor& y) override { cpu_->transpose_last2(x, y); }
  void do_split_qkv(const Tensor& qkv, const QKNorm* n, const Rope* r, Tensor& q, Tensor& k,
                    Tensor& v) override {
    cpu_->split_qkv(qkv, n, r, q, k, v);
  }
  void do_attention(const Tensor& q, const std::vector<KVSegment>& kv, float scale,
                    Tensor& out) override {
    cpu_->attention(q, kv, scale, out);
  }
  void do_store_kv(const Tensor& k, const Tensor& v, void* kd, void* vd, DType dt,
                   const Tensor* scales) override {
    cpu_->store_kv(k, v, kd, vd, dt, scales);
  }
  void do_fp8_kv_scales(const Tensor& k, const Tensor& v, Tensor& scales) override {
    cpu_->fp8_kv_scales(k, v, scales);
  }
  void do_patchify(const Tensor& img, int p, Tensor& rows) override {
    cpu_->patchify(img, p, rows);
  }
  void do_conv2d(const Tensor& x, const Tensor& w, const Tensor* b, int stride, int pad, Tensor& y,
                 Act act, bool accumulate) override {
    cpu_->conv2d(x, w, b, stride, pad, y, act, accumulate);
  }
  void do_conv_transpose2d(const Tensor& x, const Tensor& w, const Tensor* b, int stride,
                           Tensor& y) override {
    cpu_->conv_transpose2d(x, w, b, stride, y);
  }
  void do_upsample_bilinear(const Tensor& x, Tensor& y, const Tensor* add) override {
    cpu_->upsample_bilinear(x, y, add);
  }
  // The upsampled image is the op's own temporary, counted by DepthHead::upsampled_bytes_for.
  void do_upsample_conv2d(const Tensor& x, const Tensor* add, int64_t ho, int64_t wo,
                          const Tensor& w, const Tensor* b, int stride, int pad, Tensor& y,
                          Act act) override {
    cpu_->upsample_conv2d(x, add, ho, wo, w, b, stride, pad, y, act);
  }

 private:
  std::unique_ptr<Backend> cpu_;
};

const ModelConfig kTiny = ModelConfig::preset("tiny");
constexpr int64_t kH = 56, kW = 70;

TEST(ComponentBytes, DepthHeadPlanIsWhatItAllocates) {
  CountingBackend be;
  WeightLoader loader(1, be);
  const DepthHeadConfig cfg = Model::depth_head_config(kTiny);
  DepthHead head;
  head.load(loader, cfg);
  const int64_t tokens = ModelConfig::kSpecialTokens + (kH / 14) * (kW / 14);
  std::array<Tensor, 4> layers;
  for (auto& l : layers) l = be.upload(Tensor::zeros({1, tokens, cfg.dim_in}), DType::F32);
  be.bytes = 0;
  head.run(be, layers, kH, kW);
  EXPECT_EQ(be.bytes, DepthHead::plan_bytes_for(cfg, kH, kW));
  EXPECT_GT(DepthHead::scratch_bytes_for(cfg, kH, kW), 0u);
  // The larger upsampled image, that of o1 at the image size: f/2 channels.
  EXPECT_EQ(DepthHead::upsampled_bytes_for(cfg, kH, kW),
            static_cast<size_t>(cfg.features / 2 * kH * kW) * 4);
}

// The camera head on the GPU keeps its residual stream F32 and its attention operands bf16.
TEST(ComponentBytes, BlockBuffersOfTwoDtypesAreWhatTheyAllocate) {
  CountingBackend be;
  for (DType attention : {DType::F32, DType::BF16}) {
    SCOPED_TRACE(dtype_name(attention));
    be.bytes = 0;
    BlockBuffers buf;
    buf.ensure(be, 3, 64, 256, 4, DType::F32, attention);
    EXPECT_EQ(be.bytes, BlockBuffers::bytes_for(3, 64, 256, DType::F32, attention));
    EXPECT_EQ(buf.q.dtype(), attention);
    EXPECT_EQ(buf.attn.dtype(), attention);
    EXPECT_EQ(buf.qkv.dtype(), DType::F32);
  }
}

TEST(ComponentBytes, CameraHeadScratchAndCacheAreWhatTheyAllocate) {
  CountingBackend be;
  WeightLoader loader(1, be);
  const CameraHeadConfig cfg = Model::camera_head_config(kTiny);
  CameraHead head;
  head.load(loader, cfg);
  for (int64_t frames : {4, 1}) {
    SCOPED_TRACE(std::to_string(frames) + " frames");
    CameraCache cache = head.make_cache(be, 4, DType::F32);
    const Tensor tokens = be.upload(Tensor::zeros({frames, cfg.dim_in}), DType::F32);
    be.bytes = 0;
    head.run(be, tokens, cache, /*store=*/true);
    EXPECT_EQ(cache.bytes_reserved(),
              CameraHead::cache_bytes_for(cfg, 4, DType::F32, frames, CameraCacheLimit{}));
    EXPECT_EQ(be.bytes - cache.bytes_reserved(),
              CameraHead::scratch_bytes_for(cfg, frames, DType::F32));
  }
}

TEST(ComponentBytes, AggregatorWorkIsWhatItAllocates) {
  for (int64_t frames : {4, 1}) {
    SCOPED_TRACE(std::to_string(frames) + " frames");
    CountingBackend be;
    WeightLoader loader(1, be);
    Aggregator agg;
    agg.load(loader, kTiny);
    PagedKVCache cache(be, sequence_config(kTiny, kH, kW, StreamOptions{}).kv);
    cache.append(frames, false);
    const Tensor images = be.upload(Tensor::zeros({frames, 3, kH, kW}), DType::F32);
    be.bytes = 0;
    agg.enqueue(be, images, cache, frames);
    EXPECT_EQ(be.bytes, Aggregator::work_bytes_for(kTiny, frames, kH, kW));
  }
}

}  // namespace
}  // namespace lingbot
