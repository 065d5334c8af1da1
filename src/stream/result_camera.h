// A result's cameras from its pose encoding: one decoding for every producer of FrameResult
// (streamed, resumed trajectory, windowed), so that they agree bit for bit.
#pragma once

#include <cstring>

#include "lingbot/engine.h"
#include "model/pose.h"

namespace lingbot {

// Sets r.c2w, r.w2c, r.intrinsics, r.height and r.width from r.pose_enc at an image of h x w.
inline void set_camera_from_pose_enc(FrameResult& r, int h, int w) {
  const CameraPose pose = decode_pose(r.pose_enc.data(), h, w);
  std::memcpy(r.c2w.data(), pose.c2w, sizeof(pose.c2w));
  std::memcpy(r.w2c.data(), pose.w2c, sizeof(pose.w2c));
  std::memcpy(r.intrinsics.data(), pose.K, sizeof(pose.K));
  r.height = h;
  r.width = w;
}

}  // namespace lingbot
