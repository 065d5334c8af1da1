#include "stream/snapshot_file.h"

#include <fcntl.h>
#include <unistd.h>

#include <cerrno>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <nlohmann/json.hpp>
#include <set>

#include "lingbot/error.h"
#include "weights/mapped_file.h"
#include "weights/safetensors.h"

namespace lingbot {
namespace {

using Json = nlohmann::json;

// Limits no real session reaches, so that a damaged number cannot ask for absurd work.
constexpr int64_t kMaxFrames = int64_t{1} << 40;
constexpr int64_t kMaxPixels = int64_t{1} << 16;
constexpr int64_t kMaxOption = int64_t{1} << 24;

Json options_json(const StreamOptions& o) {
  return {{"scale_frames", o.scale_frames},
          {"window", o.window},
          {"keyframe_interval", o.keyframe_interval},
          {"camera_iterations", o.camera_iterations},
          {"cross_frame_special", o.cross_frame_special},
          {"camera_only", o.camera_only},
          {"include_scale_frames", o.include_scale_frames},
          {"flow_threshold", o.flow_threshold},
          {"max_non_keyframe_gap", o.max_non_keyframe_gap},
          {"max_special_frames", o.max_special_frames},
          {"descriptors", o.descriptors}};
}

Json state_json(const SnapshotState& s) {
  Json j = {{"model",
             {{"arch", s.model.arch},
              {"dim", s.model.dim},
              {"depth", s.model.depth},
              {"heads", s.model.heads},
              {"compute", s.model.compute},
              {"kv_cache", s.model.kv_cache},
              {"weights", s.model.weights}}},
            {"options", options_json(s.options)},
            {"height", s.height},
            {"width", s.width},
            {"next_index", s.next_index},
            {"pending", s.pending},
            {"started", s.started},
            {"keyframe_last", s.keyframe_last},
            {"trajectory", s.trajectory}};
  if (s.started) {
    std::vector<int> calibrated(s.calibrated.begin(), s.calibrated.end());
    j["sequence"] = {
        {"scale_frames", s.scale_frames},
        {"pages", {{"scale", s.pages.scale}, {"live", s.pages.live}, {"free", s.pages.free}}},
        {"stored_frames", s.stored_frames},
        {"calibrated", calibrated},
        {"stream_head", s.stream_head},
        {"stream_rows", s.stream_rows},
        {"camera_rows", s.camera_rows},
        {"camera_pinned", s.camera_pinned},
        {"camera_head", s.camera_head}};
  }
  return j;
}

// Typed, range-checked reads from the state's JSON: `fail` makes the one-line error.
struct Reader {
  std::function<Error(const std::string&)> fail;

  const Json& field(const Json& obj, const char* key) const {
    if (!obj.is_object()) throw fail(std::string("the state is not an object around ") + key);
    auto it = obj.find(key);
    if (it == obj.end()) throw fail(std::string("the state lacks ") + key);
    return *it;
  }
  int64_t integer(const Json& obj, const char* key, int64_t lo, int64_t hi) const {
    const Json& v = field(obj, key);
    if (!v.is_number_integer()) throw fail(std::string(key) + " is not an integer");
    const int64_t n = v.is_number_unsigned() && v.get<uint64_t>() > uint64_t{INT64_MAX}
                          ? INT64_MAX
                          : v.get<int64_t>();
    if (n < lo || n > hi)
      throw fail(std::string(key) + " = " + std::to_string(n) + " is outside [" +
                 std::to_string(lo) + ", " + std::to_string(hi) + "]");
    return n;
  }
  bool boolean(const Json& obj, const char* key) const {
    const Json& v = field(obj, key);
    if (!v.is_boolean()) throw fail(std::string(key) + " is not true or false");
    return v.get<bool>();
  }
  std::string text(const Json& obj, const char* key, size_t max = 256) const {
    const Json& v = field(obj, key);
    if (!v.is_string() || v.get_ref<const std::string&>().size() > max)
      throw fail(std::string(key) + " is not a string of at most " + std::to_string(max) +
                 " characters");
    return v.get<std::string>();
  }
  std::vector<int32_t> pages(const Json& obj, const char* key, int64_t pool) const {
    const Json& v = field(obj, key);
    if (!v.is_array() || static_cast<int64_t>(v.size()) > pool)
      throw fail(std::string("pages.") + key + " is not a list of at most " + std::to_string(pool) +
                 " pages");
    std::vector<int32_t> out;
    for (const Json& p : v) {
      if (!p.is_number_integer() || p.get<int64_t>() < 0 || p.get<int64_t>() >= pool)
        throw fail(std::string("pages.") + key + " names a page outside the pool of " +
                   std::to_string(pool));
      out.push_back(static_cast<int32_t>(p.get<int64_t>()));
    }
    return out;
  }
};

SnapshotState parse_state(const Json& j, const Reader& r) {
  SnapshotState s;
  const Json& m = r.field(j, "model");
  s.model.arch = r.text(m, "arch", 64);
  s.model.dim = r.integer(m, "dim", 1, kMaxPixels);
  s.model.depth = r.integer(m, "depth", 1, 1024);
  s.model.heads = r.integer(m, "heads", 1, 1024);
  if (s.model.dim % s.model.heads) throw r.fail("the model's width is not a multiple of its heads");
  s.model.compute = r.text(m, "compute", 16);
  s.model.kv_cache = r.text(m, "kv_cache", 16);
  s.model.weights = r.text(m, "weights", 128);
  if (s.model.compute != "F32" && s.model.compute != "BF16")
    throw r.fail("unknown compute dtype " + s.model.compute);
  if (s.model.kv_cache != "F32" && s.model.kv_cache != "BF16" && s.model.kv_cache != "F8_E4M3")
    throw r.fail("unknown KV cache dtype " + s.model.kv_cache);

  const Json& o = r.field(j, "options");
  StreamOptions& opt = s.options;
  opt.scale_frames = static_cast<int>(r.integer(o, "scale_frames", 1, kMaxOption));
  opt.window = static_cast<int>(r.integer(o, "window", 1, kMaxOption));
  opt.keyframe_interval = static_cast<int>(r.integer(o, "keyframe_interval", 1, kMaxOption));
  opt.camera_iterations = static_cast<int>(r.integer(o, "camera_iterations", 1, 64));
  opt.cross_frame_special = r.boolean(o, "cross_frame_special");
  opt.camera_only = r.boolean(o, "camera_only");
  opt.include_scale_frames = r.boolean(o, "include_scale_frames");
  const Json& flow = r.field(o, "flow_threshold");
  if (!flow.is_number() || !std::isfinite(flow.get<double>()) || flow.get<double>() < 0 ||
      flow.get<double>() > 1e30)
    throw r.fail("flow_threshold is not a finite number >= 0");
  opt.flow_threshold = flow.get<float>();
  opt.max_non_keyframe_gap = static_cast<int>(r.integer(o, "max_non_keyframe_gap", 1, kMaxOption));
  opt.max_special_frames = r.integer(o, "max_special_frames", 0, kMaxFrames);
  opt.descriptors = r.boolean(o, "descriptors");

  s.height = r.integer(j, "height", 0, kMaxPixels);
  s.width = r.integer(j, "width", 0, kMaxPixels);
  if ((s.height == 0) != (s.width == 0)) throw r.fail("one of height and width is 0");
  s.next_index = r.integer(j, "next_index", 0, kMaxFrames);
  s.pending = r.integer(j, "pending", 0, opt.scale_frames - 1);
  s.started = r.boolean(j, "started");
  s.keyframe_last = r.integer(j, "keyframe_last", -1, std::max<int64_t>(s.next_index - 1, -1));
  s.trajectory = r.integer(j, "trajectory", 0, s.next_index);
  if (s.pending > 0 && (s.started || s.height == 0))
    throw r.fail("frames are buffered for a scale block that has run or has no frame size");
  if (s.started != j.contains("sequence"))
    throw r.fail("the sequence's caches are described when it has not started, or missing");
  if (s.started) {
    if (s.height == 0) throw r.fail("a started sequence without a frame size");
    const Json& q = r.field(j, "sequence");
    s.scale_frames = r.integer(q, "scale_frames", 1, opt.scale_frames);
    const int64_t pool = int64_t{opt.scale_frames} + opt.window + 1;
    const Json& pages = r.field(q, "pages");
    s.pages.scale = r.pages(pages, "scale", pool);
    s.pages.live = r.pages(pages, "live", pool);
    s.pages.free = r.pages(pages, "free", pool);
    std::set<int32_t> seen;
    for (const auto* list : {&s.pages.scale, &s.pages.live, &s.pages.free})
      seen.insert(list->begin(), list->end());
    if (static_cast<int64_t>(s.pages.scale.size() + s.pages.live.size() + s.pages.free.size()) !=
            pool ||
        static_cast<int64_t>(seen.size()) != pool)
      throw r.fail("the page lists do not hold each of the pool's " + std::to_string(pool) +
                   " pages once");
    if (static_cast<int64_t>(s.pages.scale.size()) >
            (opt.include_scale_frames ? opt.scale_frames : 0) ||
        static_cast<int64_t>(s.pages.live.size()) > opt.window)
      throw r.fail("more pages in use than the scale frames and the window hold");
    const int64_t resident = static_cast<int64_t>(s.pages.scale.size() + s.pages.live.size());
    s.stored_frames = r.integer(q, "stored_frames", resident, s.next_index);
    const Json& cal = r.field(q, "calibrated");
    if (!cal.is_array() ||
        static_cast<int64_t>(cal.size()) != (s.model.kv_cache == "F8_E4M3" ? s.model.depth : 0))
      throw r.fail("calibrated is not one flag per layer of the e4m3 cache");
    for (const Json& c : cal) {
      if (!c.is_number_integer() || (c.get<int64_t>() != 0 && c.get<int64_t>() != 1))
        throw r.fail("calibrated holds something other than 0 and 1");
      s.calibrated.push_back(c.get<int64_t>() == 1);
    }
    const int64_t per_frame = opt.camera_only ? 1 : 6;
    s.stream_head = r.integer(q, "stream_head", 0, kMaxOption);
    s.stream_rows = r.integer(q, "stream_rows", 0, (s.stored_frames - resident) * per_frame);
    s.camera_rows = r.integer(q, "camera_rows", 0, s.stored_frames + 1);
    s.camera_pinned = r.integer(q, "camera_pinned", 0, s.camera_rows);
    s.camera_head = r.integer(q, "camera_head", 0, kMaxOption);
  }
  return s;
}

// The tensor `name` with this dtype and shape; -1 in `shape` takes whatever is there (a
// dimension the model decides, checked on resume).
const Tensor& expect(const SessionSnapshot& snap, const std::string& name, DType dtype,
                     const Shape& shape, const std::function<Error(const std::string&)>& fail) {
  auto it = snap.tensors.find(name);
  if (it == snap.tensors.end()) throw fail("tensor " + name + " is missing");
  const Tensor& t = it->second;
  bool ok = t.dtype() == dtype && t.rank() == static_cast<int>(shape.size());
  for (size_t i = 0; ok && i < shape.size(); ++i)
    ok = shape[i] < 0 ? t.shape()[i] > 0 : t.shape()[i] == shape[i];
  if (!ok) {
    std::string want = "[";
    for (size_t i = 0; i < shape.size(); ++i)
      want += (i ? ", " : "") + (shape[i] < 0 ? std::string("*") : std::to_string(shape[i]));
    throw fail("tensor " + name + " is " + dtype_name(t.dtype()) + " " + shape_str(t.shape()) +
               ", expected " + dtype_name(dtype) + " " + want + "]");
  }
  return t;
}

DType dtype_named(const std::string& name) {
  return name == "BF16" ? DType::BF16 : name == "F8_E4M3" ? DType::F8E4M3 : DType::F32;
}

}  // namespace

SessionSnapshot parse_snapshot(const uint8_t* data, size_t size, std::shared_ptr<void> owner,
                               const std::string& what) {
  const auto fail = [&](const std::string& why) {
    return Error(what + ": not a usable session snapshot (" + why + ")");
  };
  SessionSnapshot snap;
  snap.bytes = size;
  SafetensorsFile file;
  try {
    file = parse_safetensors(data, size, std::move(owner), "its container", /*fp8=*/true);
  } catch (const Error& e) {
    throw fail(std::string("truncated or damaged: ") + e.what());
  }
  const auto meta = [&](const char* key) -> std::string {
    auto it = file.metadata.find(key);
    return it == file.metadata.end() ? std::string() : it->second;
  };
  if (meta("format") != kSnapshotFormat)
    throw fail(meta("format").empty() ? "no lingbot-session format in its metadata: a checkpoint "
                                        "or another safetensors file?"
                                      : "format " + meta("format"));
  if (meta("version") != std::to_string(kSnapshotVersion))
    throw fail("version " + meta("version") + "; this build reads version " +
               std::to_string(kSnapshotVersion));
  const Json j = Json::parse(meta("state"), nullptr, /*allow_exceptions=*/false);
  if (j.is_discarded() || !j.is_object()) throw fail("its state is not a JSON object");
  snap.state = parse_state(j, Reader{fail});
  snap.tensors = std::move(file.tensors);

  const SnapshotState& s = snap.state;
  std::set<std::string> known = {"keyframe.c2w",        "keyframe.K",       "pending",
                                 "trajectory.pose_enc", "trajectory.index", "trajectory.flags"};
  expect(snap, "keyframe.c2w", DType::F32, {12}, fail);
  expect(snap, "keyframe.K", DType::F32, {9}, fail);
  expect(snap, "pending", DType::F32, {s.pending, 3, s.height, s.width}, fail);
  expect(snap, "trajectory.pose_enc", DType::F32, {s.trajectory, 9}, fail);
  expect(snap, "trajectory.index", DType::I64, {s.trajectory}, fail);
  expect(snap, "trajectory.flags", DType::U8, {s.trajectory}, fail);
  if (s.started) {
    const DType kv = dtype_named(s.model.kv_cache);
    const int64_t resident = static_cast<int64_t>(s.pages.scale.size() + s.pages.live.size());
    const int64_t head_dim = s.model.dim / s.model.heads;
    for (const char* name : {"kv.k", "kv.v"}) {
      expect(snap, name, kv, {s.model.depth, resident, -1, s.model.heads, head_dim}, fail);
      known.insert(name);
    }
    for (const char* name : {"kv.stream.k", "kv.stream.v"}) {
      expect(snap, name, kv, {s.model.depth, s.stream_rows, s.model.heads, head_dim}, fail);
      known.insert(name);
    }
    if (kv == DType::F8E4M3) {
      expect(snap, "kv.scales", DType::F32, {s.model.depth, 2, s.model.heads}, fail);
      known.insert("kv.scales");
    }
    const DType cam = dtype_named(s.model.compute);
    for (const char* name : {"camera.k", "camera.v"}) {
      const Tensor& t = expect(snap, name, cam, {-1, s.camera_rows, -1, -1}, fail);
      if (t.dim(0) % s.options.camera_iterations)
        throw fail(std::string("tensor ") + name + " does not hold a slot per iteration");
      known.insert(name);
    }
    if (snap.tensors.at("camera.k").shape() != snap.tensors.at("camera.v").shape())
      throw fail("the camera head's K and V differ in shape");
    if (snap.tensors.at("kv.k").shape() != snap.tensors.at("kv.v").shape())
      throw fail("the KV pages' K and V differ in shape");
  }
  for (const auto& [name, t] : snap.tensors)
    if (!known.count(name)) throw fail("unexpected tensor " + name);
  const Tensor& index = snap.tensors.at("trajectory.index");
  for (int64_t i = 0; i < s.trajectory; ++i) {
    const int64_t v = index.data<int64_t>()[i];
    if (v < 0 || v >= s.next_index || (i > 0 && v <= index.data<int64_t>()[i - 1]))
      throw fail("the trajectory's frame indices are not increasing below the next frame's");
  }
  return snap;
}

SessionSnapshot read_snapshot(const std::string& path) {
  std::error_code ec;
  if (std::filesystem::is_regular_file(path, ec) && std::filesystem::file_size(path, ec) == 0)
    throw Error(path + ": not a usable session snapshot (empty: a save that never ran?)");
  MappedFile f = map_file(path);
  return parse_snapshot(f.data, f.size, f.owner, path);
}

void write_snapshot(const std::string& path, const SnapshotState& state,
                    const std::vector<SnapshotTensor>& tensors, const SnapshotRead& read) {
  nlohmann::ordered_json header = nlohmann::ordered_json::object();
  header["__metadata__"] = {{"format", kSnapshotFormat},
                            {"version", std::to_string(kSnapshotVersion)},
                            {"state", state_json(state).dump()}};
  uint64_t offset = 0;
  for (const SnapshotTensor& t : tensors) {
    size_t bytes = 0;
    for (const auto& p : t.pieces) bytes += p.bytes;
    LINGBOT_CHECK(bytes == static_cast<size_t>(shape_numel(t.shape)) * dtype_size(t.dtype),
                  "snapshot: tensor " + t.name + "'s pieces do not make up its shape");
    header[t.name] = {{"dtype", dtype_name(t.dtype)},
                      {"shape", t.shape},
                      {"data_offsets", {offset, offset + bytes}}};
    offset += bytes;
  }
  const std::string prefix = safetensors_prefix(header.dump());
  const std::string tmp = path + ".partial";
  FILE* f = std::fopen(tmp.c_str(), "wb");
  if (!f) throw Error("cannot write " + path + ": " + std::strerror(errno));
  bool ok = std::fwrite(prefix.data(), 1, prefix.size(), f) == prefix.size();
  try {
    // Device bytes pass through a bounded host buffer: a snapshot of GBs needs no host copy of
    // the whole cache.
    std::vector<char> staging;
    for (const SnapshotTensor& t : tensors)
      for (const auto& p : t.pieces) {
        if (!ok || p.bytes == 0) continue;
        if (!t.device) {
          ok = std::fwrite(p.data, 1, p.bytes, f) == p.bytes;
          continue;
        }
        constexpr size_t kStaging = size_t{16} << 20;
        staging.resize(std::min(kStaging, std::max(staging.size(), p.bytes)));
        for (size_t at = 0; ok && at < p.bytes; at += staging.size()) {
          const size_t n = std::min(staging.size(), p.bytes - at);
          read(static_cast<const char*>(p.data) + at, staging.data(), n);
          ok = std::fwrite(staging.data(), 1, n, f) == n;
        }
      }
  } catch (...) {
    std::fclose(f);
    std::remove(tmp.c_str());
    throw;
  }
  // On disk before the rename: a machine that goes down right after keeps the old snapshot or
  // the whole new one.
  ok = ok && std::fflush(f) == 0 && ::fsync(::fileno(f)) == 0;
  ok = (std::fclose(f) == 0) && ok;
  if (!ok || std::rename(tmp.c_str(), path.c_str()) != 0) {
    const int err = errno;
    std::remove(tmp.c_str());
    throw Error("cannot write the session snapshot " + path + ": " +
                (err ? std::strerror(err) : "write failed (disk full?)"));
  }
}

}  // namespace lingbot
