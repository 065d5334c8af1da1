// The sky segmentation model, behind one call: an 8-bit sky score map of a picture. Built from
// OpenCV's DNN module where the build found it (sky_segmenter_opencv.cpp); otherwise
// sky_segmenter_none.cpp says that it is missing. Only those files see OpenCV, so that its
// headers and libraries stay out of everything else.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "lingbot/image.h"

namespace lingbot::sky {

// The side of the square the model sees, as the reference demo feeds its skyseg.onnx.
inline constexpr int kModelInput = 320;

class Segmenter {
 public:
  virtual ~Segmenter() = default;
  // Sky scores of `img` at its own size, [height * width], row-major: 0 where the model's output
  // is at its minimum over the picture, 255 at its maximum (higher = more sky).
  virtual std::vector<uint8_t> scores(const ImageU8& img) = 0;
};

// Whether this build can run a model (OpenCV's DNN module was found).
bool segmenter_available();

// Loads an ONNX model with one input [1, 3, 320, 320] and an output of two non-unit dimensions.
// Throws Error with one line for a missing, unreadable or unsupported file, or a build without
// OpenCV.
std::unique_ptr<Segmenter> load_segmenter(const std::string& onnx_path);

}  // namespace lingbot::sky
