#include "lingbot/source.h"

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdio>
#include <deque>
#include <filesystem>
#include <mutex>
#include <set>
#include <utility>
#include <vector>

#include "io/video.h"
#include "lingbot/error.h"

namespace lingbot {
namespace {

using Clock = std::chrono::steady_clock;

// Seconds spent reading, added up by the threads that read.
class StageClock {
 public:
  void add(std::atomic<int64_t>& to, Clock::time_point since) {
    to += std::chrono::duration_cast<std::chrono::nanoseconds>(Clock::now() - since).count();
  }
  FrameSource::Times times() const { return {decode_ns * 1e-9, preprocess_ns * 1e-9}; }
  std::atomic<int64_t> decode_ns{0}, preprocess_ns{0};
};

// Errors from preprocessing name the frame they concern.
Tensor prepare(const Preprocessor& preprocess, const ImageU8& img, const std::string& what,
               StageClock& clock) {
  const auto t0 = Clock::now();
  struct Count {
    StageClock& c;
    Clock::time_point t0;
    ~Count() { c.add(c.preprocess_ns, t0); }
  } count{clock, t0};
  try {
    return preprocess(img);
  } catch (const Error& e) {
    const std::string msg = e.what();
    if (msg.find(what) != std::string::npos) throw;
    throw Error(what + ": " + msg);
  }
}

class FolderInput final : public FrameSource {
 public:
  // `dir` is a folder, or one image (a sequence of one frame).
  FolderInput(const std::string& dir, const SourceOptions& o, Preprocessor p, bool one_image)
      : preprocess_(std::move(p)) {
    const std::vector<std::string> all =
        one_image ? std::vector<std::string>{dir} : list_images(dir);
    // The reference demo's order: the first K files, then every stride-th of those.
    const size_t k = o.first_k > 0 ? std::min<size_t>(o.first_k, all.size()) : all.size();
    for (size_t i = 0; i < k; i += static_cast<size_t>(std::max(1, o.stride)))
      paths_.push_back(all[i]);
  }
  std::optional<Tensor> get(int64_t i) override {
    if (i < 0 || i >= count()) return std::nullopt;
    const auto t0 = Clock::now();
    ImageU8 img = load_image(paths_[i]);
    clock_.add(clock_.decode_ns, t0);
    return prepare(preprocess_, img, paths_[i], clock_);
  }
  bool concurrent() const override { return true; }
  Times times() const override { return clock_.times(); }
  int64_t count() const override { return static_cast<int64_t>(paths_.size()); }
  // Exported frames keep their input's name (as PNG: they are the model input, re-encoded);
  // should two inputs differ only in extension, all fall back to numbered names.
  FrameNamer names() const override {
    std::vector<std::string> names;
    std::set<std::string> seen;
    for (const auto& p : paths_) {
      names.push_back(std::filesystem::path(p).stem().string() + ".png");
      if (!seen.insert(names.back()).second) return default_frame_name;
    }
    return [names](int64_t i) {
      return i >= 0 && i < static_cast<int64_t>(names.size()) ? names[i] : default_frame_name(i);
    };
  }

 private:
  Preprocessor preprocess_;
  std::vector<std::string> paths_;
  StageClock clock_;
};

// Video files and live sources: decoded in order; the latest frames are kept so a caller may
// ask again for a recent one, and a file is reopened to go further back.
class VideoInput final : public FrameSource {
 public:
  VideoInput(const std::string& source, const SourceOptions& o, Preprocessor p)
      : source_(source), options_(o), preprocess_(std::move(p)) {
    video_.fps = o.fps;
    video_.stride = o.stride;
    video_.first_k = o.first_k;
    video_.realtime = o.realtime;
    reader_ = VideoReader::open(source, video_);
    live_ = reader_->live();
    count_ = reader_->expected_frames();
    if (o.exact_count && !live_) {
      auto counter = VideoReader::open(source, video_);
      count_ = 0;
      while (counter->next()) ++count_;
    }
    if (!o.quiet && !live_)
      std::fprintf(stderr, "%s: %.3g frames/s, sampling 1 frame in %d\n", source.c_str(),
                   reader_->source_fps(), reader_->interval());
  }

  std::optional<Tensor> get(int64_t i) override {
    for (const auto& [index, frame] : recent_)
      if (index == i) return frame;
    if (i < next_) {
      LINGBOT_CHECK(!live_, source_ + ": frame " + std::to_string(i) +
                                " of a live source is no longer available");
      reader_ = VideoReader::open(source_, video_);
      next_ = 0;
      recent_.clear();
    }
    while (next_ <= i) {
      const auto t0 = Clock::now();
      std::optional<VideoFrame> f = reader_->next();
      clock_.add(clock_.decode_ns, t0);
      if (!f) {
        // A live source that failed after its first frame (a file's failure throws in next()).
        if (live_ && !reader_->end_reason().empty()) throw Error(reader_->end_reason());
        return std::nullopt;
      }
      const int64_t index = next_++;
      if (index < i) continue;
      {
        std::lock_guard<std::mutex> lock(times_mutex_);
        if (static_cast<int64_t>(times_.size()) == index) times_.push_back(f->timestamp);
      }
      Tensor t =
          prepare(preprocess_, f->image, source_ + ", frame " + std::to_string(index), clock_);
      recent_.emplace_back(index, t);
      while (static_cast<int64_t>(recent_.size()) > std::max<int64_t>(1, options_.keep_recent))
        recent_.pop_front();
      return t;
    }
    return std::nullopt;
  }
  int64_t count() const override { return count_; }
  bool live() const override { return live_; }
  int64_t dropped() const override { return reader_->dropped(); }
  Times times() const override { return clock_.times(); }
  std::function<double(int64_t)> timestamps() const override {
    // Asked by the outputs' threads while the reader appends.
    return [this](int64_t i) {
      std::lock_guard<std::mutex> lock(times_mutex_);
      return i >= 0 && i < static_cast<int64_t>(times_.size()) ? times_[i] : double(i);
    };
  }

 private:
  std::string source_;
  SourceOptions options_;
  VideoOptions video_;
  Preprocessor preprocess_;
  std::unique_ptr<VideoReader> reader_;
  bool live_ = false;
  int64_t count_ = 0, next_ = 0;
  std::deque<std::pair<int64_t, Tensor>> recent_;
  mutable std::mutex times_mutex_;
  std::vector<double> times_;  // by kept frame, for the trajectory (8 bytes a frame)
  StageClock clock_;
};

}  // namespace

std::unique_ptr<FrameSource> open_source(const std::string& input, const SourceOptions& options,
                                         Preprocessor preprocess) {
  const InputKind kind = classify_input(input);
  if (kind == InputKind::Folder || kind == InputKind::Image)
    return std::make_unique<FolderInput>(input, options, std::move(preprocess),
                                         kind == InputKind::Image);
  return std::make_unique<VideoInput>(input, options, std::move(preprocess));
}

}  // namespace lingbot
