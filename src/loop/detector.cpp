// The loop detector's thread: each keyframe is queried against the index of the older ones,
// its candidates verified on the images, then it is indexed itself. Everything it keeps per
// keyframe is host memory: the descriptor (8 KB for the released model), ORB keypoints and
// descriptors (~40 KB at 1,500 features) and the streamed camera.
#include <algorithm>
#include <chrono>
#include <cmath>
#include <condition_variable>
#include <deque>
#include <map>
#include <mutex>
#include <string>
#include <thread>

#include "lingbot/error.h"
#include "lingbot/loop.h"
#include "loop/features.h"

namespace lingbot {

namespace loop {

Gray to_gray(const Tensor& image) {
  Gray g;
  const bool planar = image.rank() == 3 && image.dim(0) == 3 && image.dtype() == DType::F32;
  const bool interleaved = image.rank() == 3 && image.dim(2) == 3 && image.dtype() == DType::U8;
  LINGBOT_CHECK_ARG((planar || interleaved) && image.device() == Device::CPU,
                    "loop detection: an image must be host F32 [3, H, W] or U8 [H, W, 3], got " +
                        shape_str(image.shape()));
  g.height = static_cast<int>(planar ? image.dim(1) : image.dim(0));
  g.width = static_cast<int>(planar ? image.dim(2) : image.dim(1));
  const int64_t n = int64_t{g.height} * g.width;
  g.pixels.resize(n);
  constexpr float kR = 0.299f, kG = 0.587f, kB = 0.114f;
  if (planar) {
    const float* p = image.f32();
    for (int64_t i = 0; i < n; ++i) {
      const float v = 255.f * (kR * p[i] + kG * p[n + i] + kB * p[2 * n + i]);
      g.pixels[i] = static_cast<uint8_t>(std::clamp(std::lround(v), 0L, 255L));
    }
  } else {
    const auto* p = static_cast<const uint8_t*>(image.raw());
    for (int64_t i = 0; i < n; ++i) {
      const float v = kR * p[3 * i] + kG * p[3 * i + 1] + kB * p[3 * i + 2];
      g.pixels[i] = static_cast<uint8_t>(std::clamp(std::lround(v), 0L, 255L));
    }
  }
  return g;
}

}  // namespace loop

bool loop_detection_available() {
  return loop::available();
}

PairVerification verify_pair(const Tensor& a, const Tensor& b, const LoopOptions& options) {
  return loop::verify(loop::extract(loop::to_gray(a), options),
                      loop::extract(loop::to_gray(b), options), options);
}

namespace {
using Clock = std::chrono::steady_clock;
double since(Clock::time_point t0) {
  return std::chrono::duration<double>(Clock::now() - t0).count();
}
}  // namespace

struct LoopDetector::Impl {
  struct Job {
    int64_t frame = 0;
    std::vector<float> descriptor;
    std::array<float, 12> c2w{};
    std::array<float, 9> intrinsics{};
    std::shared_ptr<const Tensor> image;
    std::vector<float> depth;  // [height * width] of the result, or empty
    int height = 0, width = 0;
  };
  struct Keyframe {
    loop::Features features;
    std::vector<float> depths;  // the streamed depth at each keypoint (NaN: unknown)
    std::array<float, 12> c2w{};
    std::array<float, 9> intrinsics{};
  };
  // A kept model input, one byte a value (frames come from 8-bit pictures).
  struct StoredFrame {
    Shape shape;
    std::vector<uint8_t> bytes;
  };

  LoopOptions o;
  Callback on_loop;
  mutable std::mutex mu;
  std::condition_variable cv;
  std::deque<Job> queue;
  bool done = false;
  std::string error;  // the first failure of the thread, raised by finish()
  std::vector<LoopClosure> loops;
  LoopStats stats;
  // Kept inputs for frame(), under frames_mu (read from other threads).
  mutable std::mutex frames_mu;
  std::map<int64_t, StoredFrame> frames;
  int64_t frame_bytes = 0;
  // Touched by the thread only.
  DescriptorIndex index;
  std::map<int64_t, Keyframe> keyframes;
  std::thread thread;

  // The depth map at each keypoint, nearest pixel.
  static std::vector<float> depths_at(const loop::Features& f, const Job& job) {
    std::vector<float> d(f.count(), NAN);
    if (job.depth.empty()) return d;
    for (int k = 0; k < f.count(); ++k) {
      const long x = std::lround(f.xy[2 * k]), y = std::lround(f.xy[2 * k + 1]);
      if (x >= 0 && y >= 0 && x < job.width && y < job.height)
        d[k] = job.depth[static_cast<size_t>(y) * job.width + x];
    }
    return d;
  }

  void keep_frame(int64_t frame, const Tensor& image) {
    if (o.frame_memory <= 0 || image.dtype() != DType::F32) return;
    StoredFrame s{image.shape(), std::vector<uint8_t>(image.numel())};
    const float* p = image.f32();
    for (size_t i = 0; i < s.bytes.size(); ++i)
      s.bytes[i] = static_cast<uint8_t>(std::clamp(std::lround(255.f * p[i]), 0L, 255L));
    std::lock_guard<std::mutex> lock(frames_mu);
    frame_bytes += static_cast<int64_t>(s.bytes.size());
    frames.emplace(frame, std::move(s));
    // Over the budget: every other kept frame goes, oldest first, the newest staying.
    while (frame_bytes > o.frame_memory && frames.size() > 1) {
      bool drop = true;
      for (auto it = frames.begin(); it != std::prev(frames.end());) {
        if (drop) {
          frame_bytes -= static_cast<int64_t>(it->second.bytes.size());
          it = frames.erase(it);
        } else {
          ++it;
        }
        drop = !drop;
      }
    }
  }

  void process(Job& job) {
    auto t0 = Clock::now();
    loop::Features features = loop::extract(loop::to_gray(*job.image), o);
    Keyframe kf{features, depths_at(features, job), job.c2w, job.intrinsics};
    keep_frame(job.frame, *job.image);
    job.image.reset();
    job.depth = {};
    const double extract_s = since(t0);
    t0 = Clock::now();
    const auto hits = index.query(job.descriptor, job.frame - o.min_gap, o.top_k, o.min_similarity);
    const double retrieve_s = since(t0);
    t0 = Clock::now();
    std::vector<LoopClosure> found;
    for (const auto& hit : hits) {
      const Keyframe& old = keyframes.at(hit.frame);
      LoopClosure l;
      l.verification = loop::verify(kf.features, old.features, o);
      if (!l.verification.accepted) continue;
      l.query = job.frame;
      l.match = hit.frame;
      l.similarity = hit.similarity;
      l.query_c2w = kf.c2w;
      l.match_c2w = old.c2w;
      l.query_intrinsics = kf.intrinsics;
      l.match_intrinsics = old.intrinsics;
      for (const auto& [a, b] : l.verification.inlier_keypoints) {
        l.query_depths.push_back(kf.depths[a]);
        l.match_depths.push_back(old.depths[b]);
      }
      found.push_back(std::move(l));
    }
    // The best verified first: a back-end that measures one loop a keyframe takes that one.
    std::stable_sort(found.begin(), found.end(), [](const LoopClosure& x, const LoopClosure& y) {
      return x.verification.inliers > y.verification.inliers;
    });
    const double verify_s = since(t0);
    index.add(job.frame, job.descriptor);
    keyframes.emplace(job.frame, std::move(kf));
    {
      std::lock_guard<std::mutex> lock(mu);
      stats.keyframes += 1;
      stats.candidates += static_cast<int64_t>(hits.size());
      stats.accepted += static_cast<int64_t>(found.size());
      stats.extract_s += extract_s;
      stats.retrieve_s += retrieve_s;
      stats.verify_s += verify_s;
      loops.insert(loops.end(), found.begin(), found.end());
    }
    if (on_loop)
      for (const LoopClosure& l : found) on_loop(l);
  }

  void work() {
    for (;;) {
      Job job;
      {
        std::unique_lock<std::mutex> lock(mu);
        cv.wait(lock, [&] { return done || !queue.empty(); });
        if (queue.empty()) return;
        job = std::move(queue.front());
        queue.pop_front();
      }
      try {
        process(job);
      } catch (const std::exception& e) {
        std::lock_guard<std::mutex> lock(mu);
        if (error.empty()) error = e.what();
        queue.clear();
        done = true;
        return;
      }
    }
  }
};

LoopDetector::LoopDetector(const LoopOptions& options, Callback on_loop)
    : impl_(std::make_unique<Impl>()) {
  if (!loop::available()) loop::extract({}, options);  // throws why
  LoopOptions& o = impl_->o;
  o = options;
  if (o.min_gap <= 0) o.min_gap = 64;
  LINGBOT_CHECK_ARG(o.top_k >= 1, "loop detection: top-k must be at least 1");
  LINGBOT_CHECK_ARG(o.min_inliers >= 8, "loop detection: at least 8 inliers are needed");
  LINGBOT_CHECK_ARG(o.min_inlier_ratio >= 0 && o.min_inlier_ratio <= 1,
                    "loop detection: the inlier ratio must be in [0, 1]");
  LINGBOT_CHECK_ARG(o.ratio > 0 && o.ratio <= 1,
                    "loop detection: the ratio test must be in (0, 1]");
  LINGBOT_CHECK_ARG(o.max_features >= 8, "loop detection: at least 8 features per image");
  LINGBOT_CHECK_ARG(o.ransac_px > 0, "loop detection: the RANSAC threshold must be > 0 pixels");
  LINGBOT_CHECK_ARG(o.queue >= 1, "loop detection: the queue must hold at least 1 keyframe");
  LINGBOT_CHECK_ARG(std::isfinite(o.min_similarity) && o.min_similarity <= 1,
                    "loop detection: the similarity floor must be at most 1");
  impl_->on_loop = std::move(on_loop);
  impl_->thread = std::thread([this] { impl_->work(); });
}

LoopDetector::~LoopDetector() {
  {
    std::lock_guard<std::mutex> lock(impl_->mu);
    impl_->done = true;
    impl_->queue.clear();
  }
  impl_->cv.notify_all();
  if (impl_->thread.joinable()) impl_->thread.join();
}

void LoopDetector::add(const FrameResult& r, std::shared_ptr<const Tensor> frame) {
  if (!r.keyframe || r.descriptor.empty() || !frame) return;
  {
    std::lock_guard<std::mutex> lock(impl_->mu);
    LINGBOT_CHECK(!impl_->done || !impl_->error.empty(), "LoopDetector::add after finish()");
    if (impl_->done) return;  // the thread failed; finish() says why
    if (static_cast<int>(impl_->queue.size()) >= impl_->o.queue) {
      ++impl_->stats.skipped;
      return;
    }
    const bool depth = r.depth.size() == static_cast<size_t>(r.height) * r.width;
    impl_->queue.push_back({r.index, r.descriptor, r.c2w, r.intrinsics, std::move(frame),
                            depth ? r.depth : std::vector<float>{}, r.height, r.width});
  }
  impl_->cv.notify_one();
}

void LoopDetector::finish() {
  const auto t0 = Clock::now();
  {
    std::lock_guard<std::mutex> lock(impl_->mu);
    impl_->done = true;
  }
  impl_->cv.notify_all();
  if (impl_->thread.joinable()) impl_->thread.join();
  std::lock_guard<std::mutex> lock(impl_->mu);
  impl_->stats.finish_wait_s += since(t0);
  if (!impl_->error.empty()) throw Error("loop detection failed: " + impl_->error);
}

std::vector<LoopClosure> LoopDetector::loops() const {
  std::lock_guard<std::mutex> lock(impl_->mu);
  return impl_->loops;
}

std::shared_ptr<const Tensor> LoopDetector::frame(int64_t index) const {
  std::lock_guard<std::mutex> lock(impl_->frames_mu);
  const auto it = impl_->frames.find(index);
  if (it == impl_->frames.end()) return nullptr;
  auto t = std::make_shared<Tensor>(Tensor::zeros(it->second.shape, DType::F32));
  float* p = t->f32();
  for (size_t i = 0; i < it->second.bytes.size(); ++i) p[i] = it->second.bytes[i] / 255.f;
  return t;
}

LoopStats LoopDetector::stats() const {
  std::lock_guard<std::mutex> lock(impl_->mu);
  return impl_->stats;
}

}  // namespace lingbot
