#include "io/video.h"

#include <algorithm>
#include <cctype>
#include <climits>
#include <cmath>
#include <cstdio>
#include <filesystem>

#include "lingbot/error.h"

#if LINGBOT_HAVE_FFMPEG
#include <atomic>
#include <chrono>
#include <cstdlib>
#include <thread>

extern "C" {
#include <libavcodec/avcodec.h>
#include <libavformat/avformat.h>
#include <libavutil/error.h>
#include <libavutil/log.h>
#include <libswscale/swscale.h>
#if LINGBOT_HAVE_AVDEVICE
#include <libavdevice/avdevice.h>
#endif
}
#endif

namespace lingbot {

bool video_supported() {
#if LINGBOT_HAVE_FFMPEG
  return true;
#else
  return false;
#endif
}

int sampling_interval(double source_fps, double fps) {
  if (!(fps > 0) || !(source_fps > 0)) return 1;
  const double r = std::nearbyint(source_fps / fps);
  return r < 1 ? 1 : r > INT_MAX ? INT_MAX : static_cast<int>(r);
}

namespace {

// "rtsp" for "rtsp://host/...", "" when `s` is not a URL.
std::string url_scheme(const std::string& s) {
  const size_t p = s.find("://");
  if (p == std::string::npos || p == 0) return "";
  for (size_t i = 0; i < p; ++i) {
    const unsigned char c = s[i];
    if (!std::isalnum(c) && c != '+' && c != '-' && c != '.') return "";
  }
  std::string scheme = s.substr(0, p);
  std::transform(scheme.begin(), scheme.end(), scheme.begin(),
                 [](unsigned char c) { return std::tolower(c); });
  return scheme;
}

bool is_image_name(const std::string& path) {
  std::string ext = std::filesystem::path(path).extension().string();
  std::transform(ext.begin(), ext.end(), ext.begin(),
                 [](unsigned char c) { return std::tolower(c); });
  return ext == ".png" || ext == ".jpg" || ext == ".jpeg";
}

}  // namespace

InputKind classify_input(const std::string& input) {
  if (!url_scheme(input).empty()) return InputKind::Live;
  namespace fs = std::filesystem;
  std::error_code ec;
  const fs::file_status st = fs::status(input, ec);
  if (fs::is_directory(st)) return InputKind::Folder;
  if (!fs::exists(st)) throw Error(input + ": no such file or folder", ErrorKind::NotFound);
  if (fs::is_character_file(st)) return InputKind::Live;
  if (is_image_name(input)) return InputKind::Image;
  return InputKind::VideoFile;
}

#if !LINGBOT_HAVE_FFMPEG

std::unique_ptr<VideoReader> VideoReader::open(const std::string&, const VideoOptions&) {
  throw Error("this build has no video support (FFmpeg libraries not found at build time)");
}

#else

namespace {

std::string av_error(int code) {
  char buf[AV_ERROR_MAX_STRING_SIZE] = {};
  av_strerror(code, buf, sizeof buf);
  return buf;
}

template <class T, void (*Free)(T**)>
struct AvFree {
  void operator()(T* p) const { Free(&p); }
};
using FormatPtr = std::unique_ptr<AVFormatContext, AvFree<AVFormatContext, avformat_close_input> >;
using CodecPtr = std::unique_ptr<AVCodecContext, AvFree<AVCodecContext, avcodec_free_context> >;
using PacketPtr = std::unique_ptr<AVPacket, AvFree<AVPacket, av_packet_free> >;
using FramePtr = std::unique_ptr<AVFrame, AvFree<AVFrame, av_frame_free> >;
struct SwsFree {
  void operator()(SwsContext* s) const { sws_freeContext(s); }
};

// FFmpeg prints to stderr by default, which would break the program's one-line errors; its
// messages are wanted only when diagnosing a source (LINGBOT_FFMPEG_LOG=1).
void init_ffmpeg_once() {
  static const bool done = [] {
    const char* env = std::getenv("LINGBOT_FFMPEG_LOG");
    av_log_set_level(env && *env && *env != '0' ? AV_LOG_WARNING : AV_LOG_QUIET);
    avformat_network_init();
#if LINGBOT_HAVE_AVDEVICE
    avdevice_register_all();
#endif
    return true;
  }();
  (void)done;
}

using Clock = std::chrono::steady_clock;

// One opened source and its video decoder. Blocking FFmpeg calls give up through the interrupt
// callback when a deadline passes (network sources) or the owner asks them to stop.
class Decoder {
 public:
  Decoder(const std::string& source, double timeout_s) : source_(source), timeout_s_(timeout_s) {
    init_ffmpeg_once();
    const std::string scheme = url_scheme(source);
    const bool device = scheme.empty() && std::filesystem::is_character_file(source);
    guarded_ = device || !scheme.empty();
    if (scheme.empty() && !device) {
      std::error_code ec;
      if (std::filesystem::file_size(source, ec) == 0 && !ec)
        throw Error(source + ": empty file, not a video");
    }
    AVFormatContext* fmt = avformat_alloc_context();
    if (!fmt) throw Error("out of memory");
    fmt->interrupt_callback = {&Decoder::interrupted, this};
    AVDictionary* opts = nullptr;
    if (!scheme.empty()) {
      // Socket timeouts in microseconds; "timeout" for rtsp/http/tcp/udp (rtsp's "stimeout"
      // before FFmpeg 5), "rw_timeout" for any protocol. The deadline below backs them up.
      const std::string us = std::to_string(static_cast<int64_t>(timeout_s * 1e6));
      av_dict_set(&opts, "timeout", us.c_str(), 0);
      av_dict_set(&opts, "stimeout", us.c_str(), 0);
      av_dict_set(&opts, "rw_timeout", us.c_str(), 0);
    }
    decltype(av_find_input_format("")) input_format = nullptr;
    if (device) {
#if LINGBOT_HAVE_AVDEVICE
      input_format = av_find_input_format("video4linux2");
#endif
      if (!input_format) {
        avformat_free_context(fmt);
        throw Error(source +
                    ": this build cannot read capture devices (no libavdevice with "
                    "video4linux2)");
      }
    }
    arm_deadline();
    int rc = avformat_open_input(&fmt, source.c_str(), input_format, &opts);
    av_dict_free(&opts);
    if (rc < 0) throw Error(source + ": cannot open as a video (" + reason(rc) + ")");
    fmt_.reset(fmt);
    arm_deadline();
    rc = avformat_find_stream_info(fmt, nullptr);
    if (rc < 0) throw Error(source + ": cannot read the stream (" + reason(rc) + ")");
    stream_ = av_find_best_stream(fmt, AVMEDIA_TYPE_VIDEO, -1, -1, nullptr, 0);
    if (stream_ < 0 || (fmt->streams[stream_]->disposition & AV_DISPOSITION_ATTACHED_PIC))
      throw Error(source + ": no video stream in it");
    AVStream* st = fmt->streams[stream_];
    const AVCodec* codec = avcodec_find_decoder(st->codecpar->codec_id);
    if (!codec)
      throw Error(source + ": no decoder for its video codec (" +
                  avcodec_get_name(st->codecpar->codec_id) + ") in this FFmpeg");
    dec_.reset(avcodec_alloc_context3(codec));
    if (!dec_ || avcodec_parameters_to_context(dec_.get(), st->codecpar) < 0)
      throw Error("out of memory");
    dec_->thread_count = 0;
    // Frame threading delays every frame by the thread count; a live source wants it now.
    if (guarded_) dec_->thread_type = FF_THREAD_SLICE;
    rc = avcodec_open2(dec_.get(), codec, nullptr);
    if (rc < 0) throw Error(source + ": cannot start the video decoder (" + av_error(rc) + ")");
    pkt_.reset(av_packet_alloc());
    frame_.reset(av_frame_alloc());
    if (!pkt_ || !frame_) throw Error("out of memory");
    for (AVRational r : {st->avg_frame_rate, st->r_frame_rate})
      if (r.num > 0 && r.den > 0) {
        fps_ = av_q2d(r);
        break;
      }
    frames_ = st->nb_frames;
    if (frames_ <= 0 && fmt->duration != AV_NOPTS_VALUE && fmt->duration > 0 && fps_ > 0)
      frames_ = static_cast<int64_t>(std::llround(fmt->duration / double(AV_TIME_BASE) * fps_));
    const bool seekable = fmt->pb && (fmt->pb->seekable & AVIO_SEEKABLE_NORMAL);
    const bool file_like_url =
        scheme == "http" || scheme == "https" || scheme == "ftp" || scheme == "file";
    live_ = device ||
            (!scheme.empty() && (!file_like_url || !seekable || fmt->duration == AV_NOPTS_VALUE));
  }

  // The next decoded picture (valid until the next call), null at the end of the stream.
  const AVFrame* next() {
    for (;;) {
      int rc = avcodec_receive_frame(dec_.get(), frame_.get());
      if (rc == 0) return frame_.get();
      if (rc == AVERROR_EOF) return nullptr;
      // A damaged packet loses its picture; later ones may still decode, as with ffmpeg itself.
      if (rc != AVERROR(EAGAIN) && rc != AVERROR_INVALIDDATA)
        throw Error(source_ + ": decoding failed (" + av_error(rc) + ")");
      if (rc == AVERROR_INVALIDDATA) continue;
      if (flushing_) return nullptr;
      if (!pending_) {
        arm_deadline();
        rc = av_read_frame(fmt_.get(), pkt_.get());
        if (rc < 0) {
          // avio marks a failed read (a connection reset, a stall past the timeout) as the end
          // of the input too, and keeps its error apart: that is a failure, not an end.
          const int io = fmt_->pb && fmt_->pb->error != AVERROR_EOF ? fmt_->pb->error : 0;
          const bool at_end = io == 0 && (rc == AVERROR_EOF || (fmt_->pb && avio_feof(fmt_->pb)));
          if (!at_end || stop_)
            throw Error(source_ + ": reading failed (" + reason(io < 0 ? io : rc) + ")");
          avcodec_send_packet(dec_.get(), nullptr);
          flushing_ = true;
          continue;
        }
        if (pkt_->stream_index != stream_) {
          av_packet_unref(pkt_.get());
          continue;
        }
        pending_ = true;
      }
      // A full decoder (frame threads) takes the packet again once a picture is out.
      if (avcodec_send_packet(dec_.get(), pkt_.get()) == AVERROR(EAGAIN)) continue;
      av_packet_unref(pkt_.get());
      pending_ = false;
    }
  }

  ImageU8 to_rgb(const AVFrame* f) {
    if (f->width <= 0 || f->height <= 0 ||
        static_cast<size_t>(f->width) * f->height > kMaxImagePixels)
      throw Error(source_ + ": unsupported picture size " + std::to_string(f->width) + "x" +
                  std::to_string(f->height));
    const auto format = static_cast<AVPixelFormat>(f->format);
    sws_.reset(sws_getCachedContext(sws_.release(), f->width, f->height, format, f->width,
                                    f->height, AV_PIX_FMT_RGB24, SWS_BICUBIC | SWS_ACCURATE_RND,
                                    nullptr, nullptr, nullptr));
    if (!sws_) throw Error(source_ + ": cannot convert its pixel format to RGB");
    // Honour the stream's matrix (BT.709 for HD) and range; swscale assumes BT.601 otherwise.
    const bool full = f->color_range == AVCOL_RANGE_JPEG || format == AV_PIX_FMT_YUVJ420P ||
                      format == AV_PIX_FMT_YUVJ422P || format == AV_PIX_FMT_YUVJ444P;
    const int space = f->colorspace == AVCOL_SPC_UNSPECIFIED ? SWS_CS_DEFAULT : f->colorspace;
    sws_setColorspaceDetails(sws_.get(), sws_getCoefficients(space), full,
                             sws_getCoefficients(SWS_CS_DEFAULT), 1, 0, 1 << 16, 1 << 16);
    ImageU8 img;
    img.width = f->width;
    img.height = f->height;
    img.rgb.resize(static_cast<size_t>(f->width) * f->height * 3);
    uint8_t* dst[4] = {img.rgb.data(), nullptr, nullptr, nullptr};
    int dst_stride[4] = {3 * f->width, 0, 0, 0};
    sws_scale(sws_.get(), f->data, f->linesize, 0, f->height, dst, dst_stride);
    return img;
  }

  // Seconds since the first decoded picture; counted frames where the stream has no times.
  double timestamp(const AVFrame* f, int64_t decoded) {
    const int64_t ts = f->best_effort_timestamp;
    if (ts == AV_NOPTS_VALUE) return fps_ > 0 ? decoded / fps_ : static_cast<double>(decoded);
    if (origin_ == AV_NOPTS_VALUE) origin_ = ts;
    return (ts - origin_) * av_q2d(fmt_->streams[stream_]->time_base);
  }

  void stop() {
    stop_ = true;
  }
  bool stopping() const {
    return stop_;
  }
  bool live() const {
    return live_;
  }
  double fps() const {
    return fps_;
  }
  int64_t frames() const {
    return frames_;
  }

 private:
  static int interrupted(void* self) {
    auto* d = static_cast<Decoder*>(self);
    if (d->stop_) return 1;
    const int64_t deadline = d->deadline_.load();
    return deadline != 0 && Clock::now().time_since_epoch().count() > deadline;
  }
  // Network and device reads must make progress within the timeout; files may take any time.
  void arm_deadline() {
    if (!guarded_) return;
    const auto d = Clock::now() + std::chrono::duration_cast<Clock::duration>(
                                      std::chrono::duration<double>(timeout_s_));
    deadline_ = d.time_since_epoch().count();
  }
  std::string reason(int rc) const {
    if (rc == AVERROR_EXIT && !stop_) {
      char buf[64];
      std::snprintf(buf, sizeof buf, "no response within %g s", timeout_s_);
      return buf;
    }
    return av_error(rc);
  }

  std::string source_;
  double timeout_s_;
  bool guarded_ = false, live_ = false, flushing_ = false, pending_ = false;
  std::atomic<bool> stop_{false};
  std::atomic<int64_t> deadline_{0};
  FormatPtr fmt_;
  CodecPtr dec_;
  PacketPtr pkt_;
  FramePtr frame_;
  std::unique_ptr<SwsContext, SwsFree> sws_;
  int stream_ = -1;
  double fps_ = 0;
  int64_t frames_ = 0;
  int64_t origin_ = AV_NOPTS_VALUE;
};

// Files (and finite downloads): decoded on demand, so the consumer sets the pace.
class FileReader final : public VideoReader {
 public:
  FileReader(std::unique_ptr<Decoder> d, const std::string& source, const VideoOptions& o)
      : d_(std::move(d)),
        source_(source),
        interval_(sampling_interval(d_->fps() > 0 ? d_->fps() : 30, o.fps)),
        sampler_(interval_, o.first_k, o.stride) {}

  std::optional<VideoFrame> next() override {
    while (!sampler_.done()) {
      const AVFrame* f = d_->next();
      if (!f) {
        if (decoded_ == 0) throw Error(source_ + ": no video frame could be decoded");
        return std::nullopt;
      }
      const int64_t i = decoded_++;
      if (!sampler_.keep(i)) continue;
      VideoFrame out;
      out.timestamp = d_->timestamp(f, i);
      out.image = d_->to_rgb(f);
      return out;
    }
    return std::nullopt;
  }
  bool live() const override { return false; }
  int64_t dropped() const override { return 0; }
  int64_t expected_frames() const override {
    return d_->frames() > 0 ? sampler_.kept_of(d_->frames()) : 0;
  }
  int interval() const override { return interval_; }
  double source_fps() const override { return d_->fps(); }
  std::string end_reason() const override { return ""; }

 private:
  std::unique_ptr<Decoder> d_;
  std::string source_;
  int interval_;
  FrameSampler sampler_;
  int64_t decoded_ = 0;
};

// Cameras and streams: a thread decodes as fast as the source delivers; the model takes the
// freshest frames from a small queue and whatever it cannot keep up with is dropped.
class LiveReader final : public VideoReader {
 public:
  LiveReader(std::unique_ptr<Decoder> d, const std::string& source, const VideoOptions& o)
      : d_(std::move(d)),
        source_(source),
        options_(o),
        queue_(static_cast<size_t>(std::max(1, o.queue_capacity))) {
    thread_ = std::thread([this] { decode_loop(); });
  }
  ~LiveReader() override {
    d_->stop();
    queue_.close();
    thread_.join();
  }

  std::optional<VideoFrame> next() override {
    if (options_.first_k > 0 && delivered_ >= options_.first_k) return std::nullopt;
    std::optional<VideoFrame> f = queue_.pop();
    if (!f) {
      std::lock_guard<std::mutex> lock(mutex_);
      if (delivered_ == 0 && !error_.empty()) throw Error(error_);
      if (delivered_ == 0) throw Error(source_ + ": no video frame could be decoded");
      return std::nullopt;
    }
    ++delivered_;
    return f;
  }
  bool live() const override { return true; }
  int64_t dropped() const override { return queue_.dropped(); }
  int64_t expected_frames() const override { return options_.first_k; }
  int interval() const override { return 1; }
  double source_fps() const override { return d_->fps(); }
  std::string end_reason() const override {
    std::lock_guard<std::mutex> lock(mutex_);
    return error_;
  }

 private:
  void decode_loop() {
    try {
      const int64_t stride = std::max(1, options_.stride);
      const Clock::time_point start = Clock::now();
      for (int64_t i = 0;; ++i) {
        const AVFrame* f = d_->next();
        if (!f) break;
        if (i % stride != 0) continue;
        VideoFrame out;
        out.timestamp = d_->timestamp(f, i);
        if (options_.realtime)
          wait_until(start + std::chrono::duration_cast<Clock::duration>(
                                 std::chrono::duration<double>(out.timestamp)));
        if (d_->stopping()) break;
        out.image = d_->to_rgb(f);
        queue_.push(std::move(out));
      }
    } catch (const std::exception& e) {
      std::lock_guard<std::mutex> lock(mutex_);
      error_ = e.what();
    }
    queue_.close();
  }

  // In short steps, so that closing the reader never waits long.
  void wait_until(Clock::time_point t) const {
    while (!d_->stopping() && Clock::now() < t)
      std::this_thread::sleep_for(
          std::min<Clock::duration>(t - Clock::now(), std::chrono::milliseconds(20)));
  }

  std::unique_ptr<Decoder> d_;
  std::string source_;
  VideoOptions options_;
  DropOldestQueue<VideoFrame> queue_;
  mutable std::mutex mutex_;
  std::string error_;
  int64_t delivered_ = 0;
  std::thread thread_;
};

}  // namespace

std::unique_ptr<VideoReader> VideoReader::open(const std::string& source,
                                               const VideoOptions& options) {
  auto d = std::make_unique<Decoder>(source, options.timeout_s);
  if (d->live() || options.realtime)
    return std::make_unique<LiveReader>(std::move(d), source, options);
  return std::make_unique<FileReader>(std::move(d), source, options);
}

#endif

}  // namespace lingbot
