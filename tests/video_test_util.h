// For the video tests: short clips encoded at test time with FFmpeg's own encoders, so no
// media file is stored in the repository. Only in builds with FFmpeg.
#pragma once

#if LINGBOT_HAVE_FFMPEG

#include <cstdint>
#include <cstdlib>
#include <fstream>
#include <string>

extern "C" {
#include <libavcodec/avcodec.h>
#include <libavformat/avformat.h>
#include <libswscale/swscale.h>
}

namespace lingbot::test {

// Frame k of the clip: a horizontal ramp that slides right by 8 pixels a frame, a vertical ramp,
// and a bright square moving diagonally.
inline void pattern_pixel(int k, int x, int y, uint8_t rgb[3]) {
  rgb[0] = static_cast<uint8_t>((x * 4 + k * 8) & 255);
  rgb[1] = static_cast<uint8_t>((y * 3) & 255);
  const bool square = x >= 4 + k * 3 && x < 20 + k * 3 && y >= 4 + k * 2 && y < 20 + k * 2;
  rgb[2] = square ? 240 : 40;
}

// Writes `frames` frames of the pattern at `fps` frames/s with encoder `codec` ("mpeg4",
// "mjpeg", "ffv1", ...), the container chosen by the file name. Returns "" or what failed.
inline std::string encode_test_video(const std::string& path, int width, int height, int frames,
                                     int fps, const char* codec = "mpeg4") {
  // swscale warns about the JPEG-range formats MJPEG needs; the clips are right as they are.
  struct QuietLog {
    int level = av_log_get_level();
    QuietLog() { av_log_set_level(AV_LOG_ERROR); }
    ~QuietLog() { av_log_set_level(level); }
  } quiet;
  AVFormatContext* oc = nullptr;
  if (avformat_alloc_output_context2(&oc, nullptr, nullptr, path.c_str()) < 0 || !oc)
    return "no container for " + path;
  const AVCodec* enc = avcodec_find_encoder_by_name(codec);
  if (!enc) {
    avformat_free_context(oc);
    return std::string("no encoder ") + codec;
  }
  AVStream* st = avformat_new_stream(oc, nullptr);
  AVCodecContext* c = avcodec_alloc_context3(enc);
  c->width = width;
  c->height = height;
  c->time_base = AVRational{1, fps};
  c->framerate = AVRational{fps, 1};
  c->pix_fmt = std::string(codec) == "mjpeg" ? AV_PIX_FMT_YUVJ420P : AV_PIX_FMT_YUV420P;
  c->gop_size = 4;
  c->max_b_frames = 0;
  // Near-lossless quantisation, so decoded pixels stay close to the pattern.
  c->flags |= AV_CODEC_FLAG_QSCALE;
  c->global_quality = FF_QP2LAMBDA * 2;
  if (oc->oformat->flags & AVFMT_GLOBALHEADER) c->flags |= AV_CODEC_FLAG_GLOBAL_HEADER;
  std::string err;
  SwsContext* sws = nullptr;
  AVFrame* f = av_frame_alloc();
  AVPacket* pkt = av_packet_alloc();
  auto drain = [&]() {
    while (avcodec_receive_packet(c, pkt) == 0) {
      // Without a duration, MP4's edit list ends at the last frame's start and drops it.
      if (pkt->duration == 0) pkt->duration = 1;
      av_packet_rescale_ts(pkt, c->time_base, st->time_base);
      pkt->stream_index = st->index;
      av_interleaved_write_frame(oc, pkt);
    }
  };
  if (avcodec_open2(c, enc, nullptr) < 0) err = "cannot open encoder";
  if (err.empty()) {
    avcodec_parameters_from_context(st->codecpar, c);
    st->time_base = c->time_base;
    if (avio_open(&oc->pb, path.c_str(), AVIO_FLAG_WRITE) < 0) err = "cannot write " + path;
  }
  if (err.empty() && avformat_write_header(oc, nullptr) < 0) err = "cannot write header";
  if (err.empty()) {
    f->format = c->pix_fmt;
    f->width = width;
    f->height = height;
    av_frame_get_buffer(f, 0);
    sws = sws_getContext(width, height, AV_PIX_FMT_RGB24, width, height, c->pix_fmt, SWS_BICUBIC,
                         nullptr, nullptr, nullptr);
    std::string rgb(static_cast<size_t>(width) * height * 3, '\0');
    for (int k = 0; k < frames; ++k) {
      for (int y = 0; y < height; ++y)
        for (int x = 0; x < width; ++x)
          pattern_pixel(k, x, y, reinterpret_cast<uint8_t*>(&rgb[(size_t(y) * width + x) * 3]));
      av_frame_make_writable(f);
      const uint8_t* src[1] = {reinterpret_cast<const uint8_t*>(rgb.data())};
      const int src_stride[1] = {3 * width};
      sws_scale(sws, src, src_stride, 0, height, f->data, f->linesize);
      f->pts = k;
      avcodec_send_frame(c, f);
      drain();
    }
    avcodec_send_frame(c, nullptr);
    drain();
    av_write_trailer(oc);
  }
  sws_freeContext(sws);
  av_packet_free(&pkt);
  av_frame_free(&f);
  avcodec_free_context(&c);
  if (oc->pb) avio_closep(&oc->pb);
  avformat_free_context(oc);
  return err;
}

// Mono 16-bit PCM, one second of silence: a media file without any video stream.
inline void write_silent_wav(const std::string& path) {
  const uint32_t rate = 8000, bytes = rate * 2;
  std::ofstream o(path, std::ios::binary);
  auto u32 = [&](uint32_t v) { o.write(reinterpret_cast<const char*>(&v), 4); };
  auto u16 = [&](uint16_t v) { o.write(reinterpret_cast<const char*>(&v), 2); };
  o << "RIFF";
  u32(36 + bytes);
  o << "WAVEfmt ";
  u32(16), u16(1), u16(1), u32(rate), u32(rate * 2), u16(2), u16(16);
  o << "data";
  u32(bytes);
  o << std::string(bytes, '\0');
}

}  // namespace lingbot::test

#endif
