// The sky segmentation model through OpenCV's DNN module: the reference demo's contract for its
// skyseg.onnx, step by step with the same library calls for the resizes so that the masks agree
// pixel for pixel (see docs/ARCHITECTURE.md, "Sky masking").
#include <algorithm>
#include <cmath>
#include <fstream>
#include <opencv2/core.hpp>
#include <opencv2/core/utils/logger.hpp>
#include <opencv2/dnn.hpp>
#include <opencv2/imgproc.hpp>

#include "io/sky_segmenter.h"
#include "lingbot/error.h"

namespace lingbot::sky {
namespace {

// ImageNet statistics, RGB, applied after scaling to [0, 1].
constexpr float kMean[3] = {0.485f, 0.456f, 0.406f};
constexpr float kStd[3] = {0.229f, 0.224f, 0.225f};

// cv::Exception's own description, without the file, line and function around it.
std::string reason(const cv::Exception& e) {
  std::string s = e.err.empty() ? e.what() : e.err;
  for (char& c : s)
    if (c == '\n' || c == '\r') c = ' ';
  return s;
}

// OpenCV logs its own errors to stderr before throwing; the Error we throw says it in one line.
class QuietOpenCV {
 public:
  QuietOpenCV() : before_(cv::utils::logging::getLogLevel()) {
    cv::utils::logging::setLogLevel(cv::utils::logging::LOG_LEVEL_SILENT);
  }
  ~QuietOpenCV() { cv::utils::logging::setLogLevel(before_); }

 private:
  cv::utils::logging::LogLevel before_;
};

class DnnSegmenter final : public Segmenter {
 public:
  explicit DnnSegmenter(const std::string& path) : path_(path) {
    if (!std::ifstream(path, std::ios::binary))
      throw Error("sky segmentation model " + path + ": no such file (or not readable)",
                  ErrorKind::NotFound);
    QuietOpenCV quiet;
    try {
      net_ = cv::dnn::readNetFromONNX(path);
    } catch (const cv::Exception& e) {
      throw Error("cannot read the sky segmentation model " + path +
                  " (not an ONNX model?): " + reason(e));
    }
    if (net_.empty())
      throw Error("cannot read the sky segmentation model " + path + ": it holds no layers");
    net_.setPreferableBackend(cv::dnn::DNN_BACKEND_OPENCV);
    net_.setPreferableTarget(cv::dnn::DNN_TARGET_CPU);
    // The reference reads the model's first output. OpenCV lists the outputs nobody consumes in
    // layer order, which for a graph whose outputs follow its nodes is the graph's order.
    const std::vector<std::string> outs = net_.getUnconnectedOutLayersNames();
    if (outs.empty()) throw Error("the sky segmentation model " + path + " has no output");
    output_ = outs.front();
    // One run on a blank picture now, so that a model that loads but cannot take a 320x320
    // picture, or gives an output of another shape, fails before the run starts.
    int h = 0, w = 0;
    forward(cv::Mat(kModelInput, kModelInput, CV_8UC3, cv::Scalar(0, 0, 0)), h, w);
  }

  std::vector<uint8_t> scores(const ImageU8& img) override {
    LINGBOT_CHECK(
        img.width > 0 && img.height > 0 && img.rgb.size() == size_t(img.width) * img.height * 3,
        "sky segmentation: the picture is empty or its pixels do not match its size");
    const cv::Mat rgb(img.height, img.width, CV_8UC3, const_cast<uint8_t*>(img.rgb.data()));
    cv::Mat small;
    cv::resize(rgb, small, cv::Size(kModelInput, kModelInput), 0, 0, cv::INTER_LINEAR);
    int h = 0, w = 0;
    const cv::Mat out = forward(small, h, w);
    // Stretched to 0..255 over this picture (truncated, as a cast to uint8 does), then back to
    // the picture's size with the same bilinear resize as the way in.
    const float* v = out.ptr<float>();
    const size_t n = size_t(h) * w;
    float lo = v[0], hi = v[0];
    for (size_t i = 0; i < n; ++i) {
      if (!std::isfinite(v[i]))
        throw Error("the sky segmentation model " + path_ + " gave a non-finite value");
      lo = std::min(lo, v[i]);
      hi = std::max(hi, v[i]);
    }
    const float range = std::max(hi - lo, 1e-8f);
    cv::Mat map8(h, w, CV_8UC1);
    for (size_t i = 0; i < n; ++i) {
      const float s = (v[i] - lo) / range * 255.0f;
      map8.data[i] = static_cast<uint8_t>(std::clamp(s, 0.0f, 255.0f));
    }
    cv::Mat back;
    cv::resize(map8, back, cv::Size(img.width, img.height), 0, 0, cv::INTER_LINEAR);
    return std::vector<uint8_t>(back.data, back.data + back.total());
  }

 private:
  // The model's output for a 320x320 RGB picture, as a contiguous float map of h x w.
  cv::Mat forward(const cv::Mat& rgb320, int& h, int& w) {
    const int sz[4] = {1, 3, kModelInput, kModelInput};
    cv::Mat blob(4, sz, CV_32F);
    float* b = blob.ptr<float>();
    const size_t plane = size_t(kModelInput) * kModelInput;
    for (int y = 0; y < kModelInput; ++y) {
      const uint8_t* row = rgb320.ptr<uint8_t>(y);
      for (int x = 0; x < kModelInput; ++x)
        for (int c = 0; c < 3; ++c)
          b[c * plane + size_t(y) * kModelInput + x] =
              (row[x * 3 + c] / 255.0f - kMean[c]) / kStd[c];
    }
    cv::Mat out;
    {
      QuietOpenCV quiet;
      try {
        net_.setInput(blob);
        out = net_.forward(output_);
      } catch (const cv::Exception& e) {
        throw Error("the sky segmentation model " + path_ +
                    " cannot run on a 1x3x320x320 input: " + reason(e));
      }
    }
    // Unit dimensions dropped (the reference squeezes), exactly two must be left.
    std::vector<int> dims;
    for (int d = 0; d < out.dims; ++d)
      if (out.size[d] != 1) dims.push_back(out.size[d]);
    if (out.depth() != CV_32F || dims.size() != 2 || out.channels() != 1)
      throw Error("the sky segmentation model " + path_ +
                  " gives an output that is not one map (expected [1, 1, H, W] floats)");
    h = dims[0];
    w = dims[1];
    return out.isContinuous() ? out : out.clone();
  }

  std::string path_, output_;
  cv::dnn::Net net_;
};

}  // namespace

bool segmenter_available() {
  return true;
}

std::unique_ptr<Segmenter> load_segmenter(const std::string& onnx_path) {
  return std::make_unique<DnnSegmenter>(onnx_path);
}

}  // namespace lingbot::sky
