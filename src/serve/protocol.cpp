#include "serve/protocol.h"

#include <algorithm>
#include <bit>
#include <cmath>
#include <cstring>
#include <nlohmann/json.hpp>

#include "io/preprocess.h"
#include "lingbot/error.h"

namespace lingbot::serve {
namespace {

using nlohmann::json;

[[noreturn]] void bad(const std::string& what) {
  throw Error(what, ErrorKind::InvalidArgument);
}

int64_t integer(const json& j, const std::string& name, int64_t lo, int64_t hi) {
  if (!j.is_number_integer()) bad("\"" + name + "\" must be an integer");
  // Unsigned values beyond int64 would wrap; they are out of range anyway.
  if (j.is_number_unsigned() && j.get<uint64_t>() > uint64_t(hi)) bad("\"" + name + "\" too large");
  const int64_t v = j.get<int64_t>();
  if (v < lo || v > hi)
    bad("\"" + name + "\" must be " + std::to_string(lo) + ".." + std::to_string(hi) + ", got " +
        std::to_string(v));
  return v;
}

bool boolean(const json& j, const std::string& name) {
  if (!j.is_boolean()) bad("\"" + name + "\" must be true or false");
  return j.get<bool>();
}

// The bounds of the CLI's options of the same names.
StreamOptions parse_stream(const json& j, StreamOptions o) {
  if (!j.is_object()) bad("\"stream\" must be an object");
  for (const auto& [key, v] : j.items()) {
    const std::string name = "stream." + key;
    if (key == "scale_frames") {
      o.scale_frames = static_cast<int>(integer(v, name, 1, 1 << 16));
    } else if (key == "window") {
      o.window = static_cast<int>(integer(v, name, 1, 1 << 20));
    } else if (key == "keyframe_interval") {
      o.keyframe_interval = static_cast<int>(integer(v, name, 0, 1 << 20));
    } else if (key == "camera_iterations") {
      o.camera_iterations = static_cast<int>(integer(v, name, 1, 64));
    } else if (key == "flow_threshold") {
      if (!v.is_number() || !std::isfinite(v.get<double>()) || v.get<double>() < 0 ||
          v.get<double>() > 1e6)
        bad("\"" + name + "\" must be a number >= 0");
      o.flow_threshold = v.get<float>();
    } else if (key == "max_non_keyframe_gap") {
      o.max_non_keyframe_gap = static_cast<int>(integer(v, name, 1, 1 << 20));
    } else if (key == "max_special_frames") {
      o.max_special_frames = integer(v, name, 0, int64_t{1} << 40);
    } else if (key == "cross_frame_special") {
      o.cross_frame_special = boolean(v, name);
    } else if (key == "camera_only") {
      o.camera_only = boolean(v, name);
    } else if (key == "include_scale_frames") {
      o.include_scale_frames = boolean(v, name);
    } else {
      bad("unknown field \"" + name + "\"");
    }
  }
  return o;
}

Start parse_start(const json& j, const StreamOptions& defaults) {
  Start s;
  s.stream = defaults;
  bool width = false, height = false;
  for (const auto& [key, v] : j.items()) {
    if (key == "type") {
      continue;
    } else if (key == "width") {
      s.width = static_cast<int>(integer(v, key, 1, 1 << 16));
      width = true;
    } else if (key == "height") {
      s.height = static_cast<int>(integer(v, key, 1, 1 << 16));
      height = true;
    } else if (key == "preprocess") {
      if (v == "crop")
        s.preprocess = PreprocessMode::Crop;
      else if (v == "pad")
        s.preprocess = PreprocessMode::Pad;
      else if (v == "none")
        s.preprocess = PreprocessMode::None;
      else
        bad("\"preprocess\" must be \"crop\", \"pad\" or \"none\"");
    } else if (key == "target") {
      s.target = static_cast<int>(integer(v, key, 14, 4088));
      if (s.target % 14 != 0) bad("\"target\" must be a multiple of 14 (the patch size)");
    } else if (key == "frames") {
      s.frames = integer(v, key, 0, int64_t{1} << 40);
    } else if (key == "maps") {
      s.maps = boolean(v, key);
    } else if (key == "stream") {
      s.stream = parse_stream(v, defaults);
    } else {
      bad("unknown field \"" + key + "\"");
    }
  }
  if (!width || !height) bad("start: \"width\" and \"height\" are required");
  if (size_t(s.width) * size_t(s.height) > kMaxImagePixels) bad("start: frames too large");
  if (s.preprocess == PreprocessMode::None && (s.width % 14 != 0 || s.height % 14 != 0))
    bad("start: with \"preprocess\":\"none\" width and height must be multiples of 14");
  const Size2 r = preprocess_resize_size(s.width, s.height, s.preprocess, s.target);
  switch (s.preprocess) {
    case PreprocessMode::Crop:
      s.model_width = r.width;
      s.model_height = std::min(r.height, s.target);
      break;
    case PreprocessMode::Pad:
      s.model_width = s.model_height = s.target;
      break;
    case PreprocessMode::None:
      s.model_width = s.width;
      s.model_height = s.height;
      break;
  }
  return s;
}

}  // namespace

ClientText parse_client_text(std::string_view text, const StreamOptions& defaults) {
  if (text.size() > kMaxTextBytes)
    bad("text message longer than " + std::to_string(kMaxTextBytes) + " bytes");
  // No exceptions from the parser itself, and its depth is bounded by the length above.
  const json j = json::parse(text, nullptr, /*allow_exceptions=*/false);
  if (j.is_discarded()) bad("message is not JSON");
  if (!j.is_object()) bad("message is not a JSON object");
  const auto type = j.find("type");
  if (type == j.end() || !type->is_string()) bad("message has no \"type\" string");
  ClientText c;
  if (*type == "start") {
    c.type = ClientText::Type::Start;
    c.start = parse_start(j, defaults);
  } else if (*type == "finish") {
    if (j.size() != 1) bad("finish: unknown field");
    c.type = ClientText::Type::Finish;
  } else {
    bad("unknown message type " + type->dump(-1, ' ', true));
  }
  return c;
}

FrameHeader parse_frame_header(const uint8_t* data, size_t size) {
  static const uint8_t kPng[8] = {0x89, 'P', 'N', 'G', '\r', '\n', 0x1a, '\n'};
  FrameHeader h;
  if (size >= 3 && data[0] == 0xff && data[1] == 0xd8 && data[2] == 0xff) {
    h.format = FrameHeader::Format::Jpeg;
    return h;
  }
  if (size >= sizeof kPng && std::memcmp(data, kPng, sizeof kPng) == 0) {
    h.format = FrameHeader::Format::Png;
    return h;
  }
  if (size < kRawHeaderBytes || std::memcmp(data, "LBR1", 4) != 0)
    bad("frame is neither JPEG, PNG nor raw RGB (\"LBR1\" header)");
  const auto u32 = [&](size_t at) {
    return uint32_t(data[at]) | uint32_t(data[at + 1]) << 8 | uint32_t(data[at + 2]) << 16 |
           uint32_t(data[at + 3]) << 24;
  };
  const uint32_t height = u32(4), width = u32(8), channels = u32(12);
  if (channels != 3) bad("raw frame: channels must be 3, got " + std::to_string(channels));
  if (width == 0 || height == 0 || width > (1 << 16) || height > (1 << 16))
    bad("raw frame: bad size " + std::to_string(width) + "x" + std::to_string(height));
  const size_t want = kRawHeaderBytes + size_t(width) * height * 3;
  if (size != want)
    bad("raw frame: " + std::to_string(width) + "x" + std::to_string(height) + " needs " +
        std::to_string(want) + " bytes, got " + std::to_string(size));
  h.format = FrameHeader::Format::Raw;
  h.width = static_cast<int>(width);
  h.height = static_cast<int>(height);
  return h;
}

std::string ready_json(const std::string& session, const std::string& device, const Start& s,
                       size_t estimate_bytes) {
  return json{{"type", "ready"},
              {"session", session},
              {"device", device},
              {"model_width", s.model_width},
              {"model_height", s.model_height},
              {"estimate_bytes", estimate_bytes}}
      .dump();
}

std::string refused_json(const std::string& reason, size_t need_bytes, size_t free_bytes) {
  return json{{"type", "refused"},
              {"reason", reason},
              {"need_bytes", need_bytes},
              {"free_bytes", free_bytes}}
      .dump();
}

std::string error_json(const std::string& reason) {
  // Replacement of invalid UTF-8: a reason may quote what the client sent.
  return json{{"type", "error"}, {"reason", reason}}.dump(-1, ' ', false,
                                                          json::error_handler_t::replace);
}

std::string finished_json(int64_t frames) {
  return json{{"type", "finished"}, {"frames", frames}}.dump();
}

std::string result_json(const FrameResult& r) {
  return json{{"type", "result"},       {"index", r.index},
              {"keyframe", r.keyframe}, {"scale_frame", r.scale_frame},
              {"pose_enc", r.pose_enc}, {"c2w", r.c2w},
              {"w2c", r.w2c},           {"intrinsics", r.intrinsics},
              {"height", r.height},     {"width", r.width}}
      .dump();
}

std::string maps_bytes(const FrameResult& r) {
  static_assert(std::endian::native == std::endian::little, "the wire format is little-endian");
  std::string out(sizeof(float) * (r.depth.size() + r.confidence.size()), '\0');
  std::memcpy(out.data(), r.depth.data(), sizeof(float) * r.depth.size());
  std::memcpy(out.data() + sizeof(float) * r.depth.size(), r.confidence.data(),
              sizeof(float) * r.confidence.size());
  return out;
}

}  // namespace lingbot::serve
