// Public API: sky masking as the reference demo's --mask_sky does it. A sky segmentation model
// (the reference's skyseg.onnx, or any ONNX model of the same contract) scores every model-input
// frame; pixels it calls sky get confidence 0, so that every export filtering on confidence (PLY,
// glTF, COLMAP, the viewer, the renderer) drops them.
//
//   lingbot::SkyMasker sky({.model = "skyseg.onnx", .dir = "masks/"});
//   sky.apply(result, frame, "000042.png");   // result.confidence *= the non-sky mask
//
// The contract (docs/ARCHITECTURE.md, "Sky masking"): the frame as 8-bit RGB, resized bilinearly
// to 320x320, scaled to [0, 1] and normalised with the ImageNet mean and deviation, fed as
// [1, 3, 320, 320]; the first output, squeezed to a map, stretched to 0..255 over the frame and
// truncated to 8 bits, resized bilinearly back to the frame's size. As in the reference, a pixel
// is kept only where that map is 0 there; the masks are stored as 8-bit PNGs, 255 = kept, and a
// stored mask keeps every pixel that is not 0.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "lingbot/engine.h"
#include "lingbot/tensor.h"

namespace lingbot {

struct SkyMaskOptions {
  // ONNX sky segmentation model; empty: masks come only from `dir` (each frame must have one).
  std::string model;
  // One PNG per frame, named after the frame (its name's stem + ".png"): read when present and
  // of the frame's size, else computed and written. Empty: computed, not stored.
  std::string dir;
  // The frame, its mask and the sky tinted red, side by side, one PNG per frame. Empty: none.
  std::string visualization_dir;
};

// Whether this build runs sky segmentation models (it needs OpenCV's DNN module); without it,
// masks stored in SkyMaskOptions::dir still apply.
bool sky_segmentation_available();

class SkyMasker {
 public:
  // Loads and tries the model once, and creates the folders. Throws Error (one line) for a
  // missing, unreadable or unsuitable model, a build that cannot run one, neither a model nor a
  // folder, or a folder that cannot be made.
  explicit SkyMasker(const SkyMaskOptions& options);
  ~SkyMasker();
  SkyMasker(const SkyMasker&) = delete;
  SkyMasker& operator=(const SkyMasker&) = delete;

  // The non-sky mask of a model-input frame (F32 [3, H, W] in [0, 1]): H * W bytes, 1 = keep,
  // 0 = sky. `name` names the frame's files in the folders. Throws Error when a stored mask is
  // unusable and there is no model to compute it again.
  std::vector<uint8_t> non_sky(const Tensor& frame, const std::string& name);
  // result.confidence multiplied by non_sky(frame, name).
  void apply(FrameResult& result, const Tensor& frame, const std::string& name);

  struct Counts {
    int64_t computed = 0, reused = 0;  // masks the model made, masks read from the folder
  };
  Counts counts() const;

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

}  // namespace lingbot
