// Per-frame cameras as JSON lines: every line is a complete object, so a reader can follow the
// file while the run goes on, and a cut-off run leaves only whole lines behind.
#include <nlohmann/json.hpp>
#include <utility>

#include "io/sinks/sink.h"
#include "io/sinks/sink_util.h"

namespace lingbot {
namespace {

// The shortest decimal of the float, as a double, so the JSON shows "0.1" rather than the
// float's exact binary value, and still reads back to the same float.
double tidy(float v) {
  return std::stod(sinks::fmt(v));
}

template <size_t N>
nlohmann::ordered_json numbers(const std::array<float, N>& a) {
  nlohmann::ordered_json j = nlohmann::ordered_json::array();
  for (float v : a)
    j.push_back(std::isfinite(v) ? nlohmann::ordered_json(tidy(v)) : nlohmann::ordered_json());
  return j;
}

class FramesJsonSink : public ResultSink {
 public:
  std::string name() const override { return "json"; }
  FramesJsonSink(const std::string& path, FrameNamer name)
      : file_(path, false), name_(std::move(name)) {}

  void add(const FrameResult& r, const Tensor*) override {
    nlohmann::ordered_json j;
    j["index"] = r.index;
    j["keyframe"] = r.keyframe;
    j["image"] = name_(r.index);
    j["pose_enc"] = numbers(r.pose_enc);
    j["c2w"] = numbers(r.c2w);
    j["w2c"] = numbers(r.w2c);
    j["intrinsics"] = numbers(r.intrinsics);
    j["width"] = r.width;
    j["height"] = r.height;
    file_.write(j.dump() + "\n");
    file_.flush();
  }

  void finish() override { file_.close(); }

 private:
  sinks::OutFile file_;
  FrameNamer name_;
};

}  // namespace

std::unique_ptr<ResultSink> make_frames_json_sink(const std::string& path, FrameNamer name) {
  return std::make_unique<FramesJsonSink>(path, name ? std::move(name) : default_frame_name);
}

}  // namespace lingbot
