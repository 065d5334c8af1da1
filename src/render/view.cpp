#include "render/view.h"

#include <algorithm>

namespace lingbot::render {

View View::look_at(Vec3 eye, Vec3 target, Vec3 up, int width, int height, float fov_y) {
  View v;
  v.eye = eye;
  v.width = width;
  v.height = height;
  v.forward = normalized(target - eye, {0, 0, 1});
  // right = down x forward and down = forward x right keep the axes right-handed as OpenCV's.
  Vec3 right = cross(up * -1.0f, v.forward);
  if (norm(right) < 1e-4f * std::max(norm(up), 1e-12f))
    right = cross(Vec3{0, 0, -1}, v.forward);  // looking straight up or down: z is "up"
  v.right = normalized(right, {1, 0, 0});
  v.down = cross(v.forward, v.right);
  v.focal = 0.5f * static_cast<float>(height) / std::tan(0.5f * fov_y);
  v.cx = 0.5f * static_cast<float>(width);
  v.cy = 0.5f * static_cast<float>(height);
  return v;
}

}  // namespace lingbot::render
