// Builds without OpenCV: no model can run (cached masks still work, see sky_mask.cpp).
#include "io/sky_segmenter.h"
#include "lingbot/error.h"

namespace lingbot::sky {

bool segmenter_available() {
  return false;
}

std::unique_ptr<Segmenter> load_segmenter(const std::string& onnx_path) {
  throw Error("cannot run the sky segmentation model " + onnx_path +
              ": this build has no OpenCV DNN module (install libopencv-dev and rebuild)");
}

}  // namespace lingbot::sky
