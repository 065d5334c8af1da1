// What a windowed run's stitched result looks like to its outputs: FrameResults and the
// predictions file.
#include <algorithm>

#include "lingbot/windowed.h"
#include "weights/safetensors.h"

namespace lingbot {

void for_each_frame(const WindowedResult& r, const Session::Callback& on_result) {
  if (!r.pose_enc.defined()) return;
  const int64_t s = r.pose_enc.dim(0), h = r.depth.dim(1), w = r.depth.dim(2), plane = h * w;
  for (int64_t i = 0; i < s; ++i) {
    FrameResult f;
    f.index = i;
    f.keyframe = r.is_keyframe.data<uint8_t>()[i] != 0;
    std::copy_n(r.pose_enc.f32() + i * 9, 9, f.pose_enc.begin());
    std::copy_n(r.c2w.f32() + i * 12, 12, f.c2w.begin());
    std::copy_n(r.w2c.f32() + i * 12, 12, f.w2c.begin());
    std::copy_n(r.intrinsics.f32() + i * 9, 9, f.intrinsics.begin());
    f.height = static_cast<int>(h);
    f.width = static_cast<int>(w);
    f.depth.assign(r.depth.f32() + i * plane, r.depth.f32() + (i + 1) * plane);
    f.confidence.assign(r.depth_conf.f32() + i * plane, r.depth_conf.f32() + (i + 1) * plane);
    on_result(f);
  }
}

void write_predictions(const std::string& path, const WindowedResult& r) {
  TensorMap t{{"pose_enc", r.pose_enc},
              {"depth", r.depth},
              {"depth_conf", r.depth_conf},
              {"c2w", r.c2w},
              {"w2c", r.w2c},
              {"intrinsics", r.intrinsics},
              {"frame_type", r.frame_type},
              {"is_keyframe", r.is_keyframe},
              {"chunk_scales", r.chunk_scales},
              {"chunk_transforms", r.chunk_transforms}};
  write_safetensors(
      path, t, {{"pose_convention", "c2w = [R(q)|t], OpenCV camera axes"}, {"mode", "windowed"}});
}

}  // namespace lingbot
