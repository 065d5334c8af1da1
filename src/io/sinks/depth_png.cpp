// Depth and confidence maps as 16-bit PNG with one fixed scale per kind (the depth_mm habit of
// RGB-D datasets), which most image and RGB-D tools read without knowing anything about us.
#include <cmath>
#include <future>
#include <nlohmann/json.hpp>
#include <utility>
#include <vector>

#include "io/image.h"
#include "io/sinks/sink.h"
#include "io/sinks/sink_util.h"

namespace lingbot {
namespace {

void quantise(const std::vector<float>& in, float scale, std::vector<uint16_t>& out) {
  out.resize(in.size());
  for (size_t i = 0; i < in.size(); ++i) {
    const double v = static_cast<double>(in[i]) * scale;
    out[i] = !(v > 0) ? 0 : v >= 65535 ? 65535 : static_cast<uint16_t>(std::lround(v));
  }
}

class DepthPngSink : public ResultSink {
 public:
  std::string name() const override { return "depth"; }
  DepthPngSink(const std::string& dir, DepthPngOptions o, FrameNamer name)
      : dir_(dir), o_(o), name_(std::move(name)) {
    LINGBOT_CHECK(o.depth_scale > 0 && std::isfinite(o.depth_scale) && o.confidence_scale > 0 &&
                      std::isfinite(o.confidence_scale),
                  "the depth and confidence scales must be positive");
    sinks::make_folder(dir_ + "/depth");
    sinks::make_folder(dir_ + "/confidence");
    // Written first: a reader of an interrupted run needs the scale as much as the maps.
    nlohmann::ordered_json j = {
        {"depth_scale", o_.depth_scale},
        {"confidence_scale", o_.confidence_scale},
        {"depth_folder", "depth"},
        {"confidence_folder", "confidence"},
        {"encoding", "16-bit greyscale PNG; value = png / scale; depth 0 = none or negative"}};
    sinks::OutFile f(dir_ + "/depth_scale.json", false);
    f.write(j.dump(2) + "\n");
    f.close();
  }

  void add(const FrameResult& r, const Tensor*) override {
    sinks::check_result(r);
    const std::string name = name_(r.index);
    // The two maps are encoded at once: deflate is most of this output's time.
    auto confidence = std::async(std::launch::async, [&] {
      quantise(r.confidence, o_.confidence_scale, conf_buf_);
      write_png_gray16(dir_ + "/confidence/" + name, r.width, r.height, conf_buf_.data());
    });
    quantise(r.depth, o_.depth_scale, buf_);
    write_png_gray16(dir_ + "/depth/" + name, r.width, r.height, buf_.data());
    confidence.get();
  }

  void finish() override {}

 private:
  std::string dir_;
  DepthPngOptions o_;
  FrameNamer name_;
  std::vector<uint16_t> buf_, conf_buf_;
};

}  // namespace

std::unique_ptr<ResultSink> make_depth_png_sink(const std::string& dir, DepthPngOptions options,
                                                FrameNamer name) {
  return std::make_unique<DepthPngSink>(dir, options, name ? std::move(name) : default_frame_name);
}

}  // namespace lingbot
