#include "render/encoder.h"

#include <algorithm>
#include <cctype>
#include <filesystem>

#include "lingbot/error.h"

#if LINGBOT_HAVE_FFMPEG
#include <cstdlib>
#include <vector>

extern "C" {
#include <libavcodec/avcodec.h>
#include <libavformat/avformat.h>
#include <libavutil/error.h>
#include <libavutil/log.h>
#include <libavutil/opt.h>
#include <libswscale/swscale.h>
}
#endif

namespace lingbot::render {

bool is_video_name(const std::string& path) {
  std::string ext = std::filesystem::path(path).extension().string();
  std::transform(ext.begin(), ext.end(), ext.begin(),
                 [](unsigned char c) { return char(std::tolower(c)); });
  return ext == ".mp4" || ext == ".mkv" || ext == ".mov" || ext == ".avi" || ext == ".webm";
}

#if LINGBOT_HAVE_FFMPEG

namespace {

std::string av_message(int err) {
  char buf[AV_ERROR_MAX_STRING_SIZE] = {};
  av_strerror(err, buf, sizeof buf);
  return buf;
}

// The encoders print progress and statistics to stderr, which would break the program's
// one-line output; wanted only when diagnosing (LINGBOT_FFMPEG_LOG=1, as for reading).
void quiet_ffmpeg_once() {
  static const bool done = [] {
    const char* env = std::getenv("LINGBOT_FFMPEG_LOG");
    av_log_set_level(env && *env && *env != '0' ? AV_LOG_WARNING : AV_LOG_QUIET);
    return true;
  }();
  (void)done;
}

}  // namespace

struct VideoEncoder::Impl {
  std::string name, codec;
  AVFormatContext* oc = nullptr;
  AVCodecContext* c = nullptr;
  AVStream* st = nullptr;
  AVFrame* frame = nullptr;
  AVPacket* pkt = nullptr;
  SwsContext* sws = nullptr;
  int64_t pts = 0;

  ~Impl() {
    sws_freeContext(sws);
    av_packet_free(&pkt);
    av_frame_free(&frame);
    avcodec_free_context(&c);
    if (oc && oc->pb) avio_closep(&oc->pb);
    avformat_free_context(oc);
  }
  void check(int err, const char* what) const {
    if (err < 0) throw Error("cannot write " + name + ": " + what + " (" + av_message(err) + ")");
  }
  // Hands every packet the encoder has ready to the muxer.
  void drain() {
    for (;;) {
      const int err = avcodec_receive_packet(c, pkt);
      if (err == AVERROR(EAGAIN) || err == AVERROR_EOF) return;
      check(err, "encoding failed");
      // Without a duration, MP4's edit list ends at the last frame's start and drops it.
      if (pkt->duration == 0) pkt->duration = 1;
      av_packet_rescale_ts(pkt, c->time_base, st->time_base);
      pkt->stream_index = st->index;
      check(av_interleaved_write_frame(oc, pkt), "writing failed");
    }
  }
};

VideoEncoder::VideoEncoder(const std::string& path, const std::string& name, int width, int height,
                           int fps)
    : impl_(std::make_unique<Impl>()) {
  quiet_ffmpeg_once();
  Impl& m = *impl_;
  m.name = name;
  LINGBOT_CHECK_ARG(width % 2 == 0 && height % 2 == 0 && fps >= 1,
                    "video frames need even sides and at least 1 frame/s");
  if (avformat_alloc_output_context2(&m.oc, nullptr, nullptr, name.c_str()) < 0 || !m.oc)
    throw Error("cannot write " + name + ": no video container for that extension",
                ErrorKind::InvalidArgument);
  const AVOutputFormat* of = m.oc->oformat;
  auto takes = [&](AVCodecID id) {
    return id != AV_CODEC_ID_NONE && avformat_query_codec(of, id, FF_COMPLIANCE_NORMAL) == 1;
  };
  std::vector<const AVCodec*> candidates;
  if (takes(AV_CODEC_ID_H264)) {
    candidates.push_back(avcodec_find_encoder_by_name("libx264"));
    candidates.push_back(avcodec_find_encoder(AV_CODEC_ID_H264));
  }
  candidates.push_back(avcodec_find_encoder(of->video_codec));
  if (takes(AV_CODEC_ID_MPEG4)) candidates.push_back(avcodec_find_encoder(AV_CODEC_ID_MPEG4));
  for (const AVCodec* enc : candidates) {
    if (!enc) continue;
    m.c = avcodec_alloc_context3(enc);
    if (!m.c) throw std::bad_alloc();
    m.c->width = width;
    m.c->height = height;
    m.c->time_base = AVRational{1, fps};
    m.c->framerate = AVRational{fps, 1};
    m.c->gop_size = 2 * fps;
    m.c->pix_fmt = AV_PIX_FMT_YUV420P;
    if (enc->pix_fmts) {  // the encoder's first format when it cannot take 4:2:0
      bool yuv420 = false;
      for (const AVPixelFormat* p = enc->pix_fmts; *p != AV_PIX_FMT_NONE; ++p)
        yuv420 |= *p == AV_PIX_FMT_YUV420P;
      if (!yuv420) m.c->pix_fmt = enc->pix_fmts[0];
    }
    if (of->flags & AVFMT_GLOBALHEADER) m.c->flags |= AV_CODEC_FLAG_GLOBAL_HEADER;
    if (std::string(enc->name) == "libx264") {
      // Quick to encode, visually lossless for flat-shaded points on a dark background.
      av_opt_set(m.c->priv_data, "preset", "superfast", 0);
      av_opt_set(m.c->priv_data, "crf", "20", 0);
    } else {
      m.c->flags |= AV_CODEC_FLAG_QSCALE;  // fixed quality (MPEG-4 part 2 and the like)
      m.c->global_quality = FF_QP2LAMBDA * 3;
    }
    if (avcodec_open2(m.c, enc, nullptr) == 0) {
      m.codec = enc->name;
      break;
    }
    avcodec_free_context(&m.c);  // e.g. a hardware encoder without its hardware: the next one
  }
  if (!m.c)
    throw Error("cannot write " + name + ": this build's FFmpeg has no encoder for that container");
  m.st = avformat_new_stream(m.oc, nullptr);
  if (!m.st) throw std::bad_alloc();
  m.check(avcodec_parameters_from_context(m.st->codecpar, m.c), "stream setup failed");
  m.st->time_base = m.c->time_base;
  m.check(avio_open(&m.oc->pb, path.c_str(), AVIO_FLAG_WRITE), "cannot create the file");
  m.check(avformat_write_header(m.oc, nullptr), "cannot write the header");
  m.frame = av_frame_alloc();
  m.pkt = av_packet_alloc();
  if (!m.frame || !m.pkt) throw std::bad_alloc();
  m.frame->format = m.c->pix_fmt;
  m.frame->width = width;
  m.frame->height = height;
  m.check(av_frame_get_buffer(m.frame, 0), "no memory for a frame");
  m.sws = sws_getContext(width, height, AV_PIX_FMT_RGB24, width, height, m.c->pix_fmt,
                         SWS_BILINEAR | SWS_ACCURATE_RND, nullptr, nullptr, nullptr);
  if (!m.sws) throw Error("cannot write " + name + ": no conversion to the encoder's pixels");
}

VideoEncoder::~VideoEncoder() = default;

const std::string& VideoEncoder::codec() const {
  return impl_->codec;
}

void VideoEncoder::add(const ImageU8& img) {
  Impl& m = *impl_;
  LINGBOT_CHECK_ARG(img.width == m.c->width && img.height == m.c->height &&
                        img.rgb.size() == size_t(img.width) * img.height * 3,
                    "a video frame of the wrong size");
  m.check(av_frame_make_writable(m.frame), "no memory for a frame");
  const uint8_t* src[1] = {img.rgb.data()};
  const int stride[1] = {3 * img.width};
  sws_scale(m.sws, src, stride, 0, img.height, m.frame->data, m.frame->linesize);
  m.frame->pts = m.pts++;
  m.check(avcodec_send_frame(m.c, m.frame), "encoding failed");
  m.drain();
}

void VideoEncoder::finish() {
  Impl& m = *impl_;
  m.check(avcodec_send_frame(m.c, nullptr), "encoding failed");
  m.drain();
  m.check(av_write_trailer(m.oc), "cannot finish the file");
  m.check(avio_closep(&m.oc->pb), "cannot close the file");
}

#else

struct VideoEncoder::Impl {
  std::string codec;
};

VideoEncoder::VideoEncoder(const std::string&, const std::string& name, int, int, int) {
  throw Error("cannot write " + name + ": this build has no video support (FFmpeg)");
}
VideoEncoder::~VideoEncoder() = default;
const std::string& VideoEncoder::codec() const {
  return impl_->codec;
}
void VideoEncoder::add(const ImageU8&) {}
void VideoEncoder::finish() {}

#endif

}  // namespace lingbot::render
