// The stream server's messages (docs/SERVE.md): parsing what clients send, the start message
// and the frames' headers, and writing what the server answers. Kept apart from the sockets so
// that a fuzz target can exercise the parsers alone.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>

#include "lingbot/engine.h"
#include "lingbot/image.h"

namespace lingbot::serve {

// Text messages from clients are at most this long.
inline constexpr size_t kMaxTextBytes = 4096;
// Raw frames: "LBR1", then height, width and channels as uint32 little-endian.
inline constexpr size_t kRawHeaderBytes = 16;

// A stream's start message.
struct Start {
  int width = 0, height = 0;  // of the frames the client sends
  PreprocessMode preprocess = PreprocessMode::Crop;
  int target = 518;
  int64_t frames = 0;  // expected; 0 = open-ended
  bool maps = false;   // send depth and confidence
  StreamOptions stream;
  int model_width = 0, model_height = 0;  // the frames' size after preprocessing
};

struct ClientText {
  enum class Type { Start, Finish } type = Type::Start;
  Start start;  // Type::Start
};

// A text message from a client: {"type":"start",...} (fields missing from "stream" are taken
// from `defaults`) or {"type":"finish"}. Throws Error, one line saying what is wrong, for
// anything else: not JSON, an unknown type or field, a value of the wrong type or out of range,
// a frame size the preprocessing cannot produce.
ClientText parse_client_text(std::string_view text, const StreamOptions& defaults);

// What a binary frame message holds, from its first bytes.
struct FrameHeader {
  enum class Format { Jpeg, Png, Raw } format = Format::Raw;
  int width = 0, height = 0;  // Raw only: the header's (JPEG and PNG: known once decoded)
};

// Recognises a JPEG or PNG by its magic, or reads a raw frame's header and checks that the
// message holds exactly its pixels; throws Error otherwise.
FrameHeader parse_frame_header(const uint8_t* data, size_t size);

// Server messages.
std::string ready_json(const std::string& session, const std::string& device, const Start& s,
                       size_t estimate_bytes);
std::string refused_json(const std::string& reason, size_t need_bytes, size_t free_bytes);
std::string error_json(const std::string& reason);
std::string finished_json(int64_t frames);
std::string result_json(const FrameResult& r);
// float32 little-endian depth[h*w], then confidence[h*w].
std::string maps_bytes(const FrameResult& r);

}  // namespace lingbot::serve
