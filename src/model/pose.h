// The camera head's 9-value pose encoding and the camera it describes.
// pose_enc = [T (3) | quaternion x, y, z, w (4) | fov_h, fov_w (2)], where [R(q) | T] maps camera
// coordinates to world coordinates (OpenCV axes: x right, y down, z forward).
#pragma once

namespace lingbot {

struct CameraPose {
  float c2w[3][4];  // [R | T]: X_world = R X_cam + T, T the camera centre
  float w2c[3][4];  // [R^T | -R^T T]
  float K[3][3];    // pinhole intrinsics, principal point at the image centre
};

// Quaternions need not be unit length: the rotation normalises implicitly (s = 2 / |q|^2).
// A field of view of exactly 0 (possible after the head's ReLU) gives an infinite focal length.
CameraPose decode_pose(const float pose_enc[9], int H, int W);

// The reverse mapping from c2w and K (PyTorch3D's mat_to_quat, w >= 0, not renormalised).
void encode_pose(const CameraPose& pose, int H, int W, float pose_enc[9]);

}  // namespace lingbot
