// The frames as the model saw them (after crop/resize), so that the cameras COLMAP and
// nerfstudio get describe the pictures beside them exactly.
#include <utility>
#include <vector>

#include "io/image.h"
#include "io/sinks/sink.h"
#include "io/sinks/sink_util.h"

namespace lingbot {
namespace {

class ImageSink : public ResultSink {
 public:
  std::string name() const override { return "images"; }
  ImageSink(const std::string& dir, FrameNamer name) : dir_(dir), name_(std::move(name)) {
    sinks::make_folder(dir_);
  }

  void add(const FrameResult& r, const Tensor* rgb) override {
    if (!rgb) return;
    const sinks::PixelColours colours(rgb, r);
    ImageU8 img{r.width, r.height,
                std::vector<uint8_t>(static_cast<size_t>(r.width) * r.height * 3)};
    for (int64_t i = 0; i < static_cast<int64_t>(r.width) * r.height; ++i) {
      const auto c = colours.at(i);
      for (int k = 0; k < 3; ++k) img.rgb[i * 3 + k] = c[k];
    }
    write_png(dir_ + "/" + name_(r.index), img);
  }

  void finish() override {}

 private:
  std::string dir_;
  FrameNamer name_;
};

}  // namespace

std::unique_ptr<ResultSink> make_image_sink(const std::string& dir, FrameNamer name) {
  return std::make_unique<ImageSink>(dir, name ? std::move(name) : default_frame_name);
}

}  // namespace lingbot
