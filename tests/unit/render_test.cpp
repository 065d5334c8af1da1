// The renderer: the rasteriser's projection, depth test, splats and lines, the camera paths, and
// whole frames of a small made-up run (colours, growth along the trajectory).
#include "lingbot/render.h"

#include <gtest/gtest.h>
#include <omp.h>

#include <cmath>
#include <filesystem>
#include <fstream>

#include "lingbot/error.h"
#include "render/camera_path.h"
#include "render/raster.h"
#include "test_util.h"

namespace lingbot {
namespace {

using render::Canvas;
using render::PointCloud;
using render::Rgb;
using render::Vec3;
using render::View;

constexpr float kPi = 3.14159265f;

Rgb pixel(const ImageU8& img, int x, int y) {
  const size_t i = (static_cast<size_t>(y) * img.width + x) * 3;
  return {img.rgb[i], img.rgb[i + 1], img.rgb[i + 2]};
}

int count_not(const ImageU8& img, Rgb colour) {
  int n = 0;
  for (int y = 0; y < img.height; ++y)
    for (int x = 0; x < img.width; ++x) n += pixel(img, x, y) != colour;
  return n;
}

int distance(Rgb a, Rgb b) {
  int d = 0;
  for (int k = 0; k < 3; ++k) d = std::max(d, std::abs(int(a[k]) - int(b[k])));
  return d;
}

// From the origin along +z with "up" = -y: the first camera's own view, focal 50 at 64x48.
View front_view() {
  return View::look_at({0, 0, 0}, {0, 0, 1}, render::kWorldUp, 64, 48, 2 * std::atan(24.0f / 50));
}

void add_point(PointCloud& c, Vec3 p, Rgb rgb, float footprint) {
  c.xyz.insert(c.xyz.end(), p.begin(), p.end());
  c.rgb.insert(c.rgb.end(), rgb.begin(), rgb.end());
  c.footprint.push_back(footprint);
}

TEST(Raster, LookAtKeepsTheCameraAxes) {
  const View v = front_view();
  EXPECT_NEAR(v.focal, 50, 1e-3);
  for (int k = 0; k < 3; ++k) {
    EXPECT_NEAR(v.right[k], k == 0, 1e-6);
    EXPECT_NEAR(v.down[k], k == 1, 1e-6);
    EXPECT_NEAR(v.forward[k], k == 2, 1e-6);
  }
}

TEST(Raster, AKnownPointLandsOnItsPixel) {
  const View v = front_view();
  // u = 50 * 0.2 / 2 + 32 = 37, v = 50 * -0.1 / 2 + 24 = 21.5: pixel (37, 21).
  PointCloud c;
  add_point(c, {0.2f, -0.1f, 2}, {200, 10, 20}, 1e-3f);
  Canvas canvas(64, 48, kViewBackground);
  canvas.draw_points(v, c, c.size(), 1);
  canvas.resolve();
  const ImageU8 img = canvas.image();
  EXPECT_EQ(pixel(img, 37, 21), (Rgb{200, 10, 20}));
  EXPECT_EQ(count_not(img, kViewBackground), 1);
  EXPECT_FLOAT_EQ(canvas.depth(37, 21), 2);
}

TEST(Raster, AnEmptyCanvasIsTheViewBackground) {
  Canvas canvas(40, 30, kViewBackground);
  EXPECT_EQ(count_not(canvas.image(), kViewBackground), 0);
  // Points behind the camera or outside the picture leave it so.
  PointCloud c;
  add_point(c, {0, 0, -1}, {255, 255, 255}, 0.1f);
  add_point(c, {100, 0, 1}, {255, 255, 255}, 0.1f);
  add_point(c, {NAN, 0, 1}, {255, 255, 255}, 0.1f);
  canvas.draw_points(front_view(), c, c.size(), 1);
  canvas.resolve();
  EXPECT_EQ(count_not(canvas.image(), kViewBackground), 0);
}

TEST(Raster, TheNearestPointWinsInAnyOrder) {
  for (int order = 0; order < 2; ++order) {
    PointCloud c;
    const Vec3 near{0, 0, 2}, far{0, 0, 4};
    add_point(c, order ? far : near, order ? Rgb{0, 0, 255} : Rgb{255, 0, 0}, 1e-3f);
    add_point(c, order ? near : far, order ? Rgb{255, 0, 0} : Rgb{0, 0, 255}, 1e-3f);
    Canvas canvas(64, 48, kViewBackground);
    canvas.draw_points(front_view(), c, c.size(), 1);
    canvas.resolve();
    EXPECT_EQ(pixel(canvas.image(), 32, 24), (Rgb{255, 0, 0})) << order;
  }
}

TEST(Raster, SplatsAreRoundAndShrinkWithDistance) {
  // Footprint 0.2 at depth 2 with focal 50: 5 pixels across (area ~ 19.6 pixels).
  PointCloud c;
  add_point(c, {0, 0, 2}, {255, 255, 255}, 0.2f);
  Canvas canvas(64, 48, kViewBackground);
  canvas.draw_points(front_view(), c, c.size(), 1);
  canvas.resolve();
  const ImageU8 img = canvas.image();
  const int area = count_not(img, kViewBackground);
  EXPECT_NEAR(area, kPi * 2.5f * 2.5f, 6);
  EXPECT_NE(pixel(img, 32, 24), kViewBackground);
  EXPECT_NE(pixel(img, 30, 24), kViewBackground);
  EXPECT_EQ(pixel(img, 29, 21), kViewBackground);  // a corner of the bounding square
  // Twice as far: half the diameter; point_size scales it.
  Canvas far(64, 48, kViewBackground), big(64, 48, kViewBackground);
  PointCloud c2;
  add_point(c2, {0, 0, 4}, {255, 255, 255}, 0.2f);
  far.draw_points(front_view(), c2, 1, 1);
  far.resolve();
  big.draw_points(front_view(), c2, 1, 2);
  big.resolve();
  EXPECT_LT(count_not(far.image(), kViewBackground), area / 2);
  EXPECT_EQ(count_not(big.image(), kViewBackground), area);
}

TEST(Raster, LinesAreDrawnInTheirColourAndHiddenBehindPoints) {
  const View v = front_view();
  const Rgb red{255, 0, 0};
  Canvas canvas(64, 48, kViewBackground);
  canvas.resolve();
  // Row 24 of pixel centres is y = 0 at depth 2 (v = 24.5 is below it): a line from x = -0.5 to
  // x = 0.5 at y = 0.5 / 50 * 2 lies exactly on the centres of row 24.
  const float y = 0.5f / 50 * 2;
  canvas.draw_line(v, {-0.5f, y, 2}, {0.5f, y, 2}, red);
  const ImageU8 img = canvas.image();
  for (int x = 20; x <= 44; ++x) EXPECT_EQ(pixel(img, x, 24), red) << x;
  EXPECT_EQ(pixel(img, 32, 22), kViewBackground);
  EXPECT_EQ(pixel(img, 5, 24), kViewBackground);  // beyond its end

  // A point in front hides the line; one behind does not.
  PointCloud c;
  add_point(c, {0, 0.5f / 50, 1}, {0, 255, 0}, 1e-3f);                  // pixel (32, 24) at depth 1
  add_point(c, {5.5f / 50 * 3, 0.5f / 50 * 3, 3}, {0, 0, 255}, 1e-3f);  // (37, 24) at depth 3
  Canvas occluded(64, 48, kViewBackground);
  occluded.draw_points(v, c, c.size(), 1);
  occluded.resolve();
  EXPECT_EQ(pixel(occluded.image(), 37, 24), (Rgb{0, 0, 255}));
  occluded.draw_line(v, {-0.5f, y, 2}, {0.5f, y, 2}, red);
  const ImageU8 o = occluded.image();
  EXPECT_EQ(pixel(o, 32, 24), (Rgb{0, 255, 0}));
  EXPECT_EQ(pixel(o, 37, 24), red);

  // Lines are clipped at the camera: one behind it draws nothing, one through it only the part
  // in front (here: from the centre downwards), not a mirror image.
  Canvas clipped(64, 48, kViewBackground);
  clipped.resolve();
  clipped.draw_line(v, {-1, 0, -2}, {1, 0, -1}, red);
  EXPECT_EQ(count_not(clipped.image(), kViewBackground), 0);
  clipped.draw_line(v, {0, y, 2}, {0, y, -2}, red);
  const ImageU8 through = clipped.image();
  EXPECT_GT(count_not(through, kViewBackground), 0);
  for (int yy = 0; yy < 23; ++yy)
    for (int x = 0; x < 64; ++x)
      EXPECT_EQ(pixel(through, x, yy), kViewBackground) << x << "," << yy;
}

// A run of `n` 32x24 frames moving along +z (0.5 a frame), depth 4, confidence `conf`.
RunResult make_run(int n, float conf = 3, float jitter = 0) {
  RunResult run;
  run.dir = "no-such-folder";
  for (int i = 0; i < n; ++i) {
    FrameResult f;
    f.index = i;
    const float x = jitter * ((i % 2) ? 1.0f : -1.0f);
    f.c2w = {1, 0, 0, x, 0, 1, 0, 0, 0, 0, 1, 0.5f * i};
    f.w2c = {1, 0, 0, -x, 0, 1, 0, 0, 0, 0, 1, -0.5f * i};
    f.intrinsics = {16, 0, 16, 0, 16, 12, 0, 0, 1};
    f.width = 32;
    f.height = 24;
    f.depth.assign(32 * 24, 4.0f);
    f.confidence.assign(32 * 24, conf);
    run.frames.push_back(f);
  }
  return run;
}

TEST(RenderPaths, FollowIsBehindAndAboveTheCurrentCamera) {
  render::Scene s;
  for (int i = 0; i < 10; ++i) {
    s.centres.push_back({0, 0, 0.5f * i});
    s.forwards.push_back({0, 0, 1});
  }
  s.depth = 4;
  render::set_bounds(s, {});
  const render::CameraPlan plan(s, CameraPath::Follow, 64, 48, 1.0f);
  for (int i : {0, 5, 9}) {
    const View v = plan.at(i);
    const Vec3 c = s.centres[i];
    EXPECT_LT(v.eye[2], c[2]) << "behind";
    EXPECT_LT(v.eye[1], c[1]) << "above (up is -y)";
    const render::Projected p = v.project_view(v.to_view(c));
    EXPECT_GT(p.z, 0);
    EXPECT_TRUE(p.u >= 0 && p.u < 64 && p.v >= 0 && p.v < 48) << p.u << " " << p.v;
  }
  // Half way between two frames: half way between their views.
  EXPECT_NEAR(plan.at(4.5).eye[2], 0.5f * (plan.at(4).eye[2] + plan.at(5).eye[2]), 1e-4);
}

TEST(RenderPaths, FollowSmoothsAShakyTrajectory) {
  render::Scene s;
  for (int i = 0; i < 40; ++i) {
    s.centres.push_back({i % 2 ? 0.2f : -0.2f, 0, 0.5f * i});
    s.forwards.push_back({0, 0, 1});
  }
  s.depth = 4;
  render::set_bounds(s, {});
  const render::CameraPlan plan(s, CameraPath::Follow, 64, 48, 1.0f);
  for (int i = 10; i < 30; ++i) EXPECT_LT(std::fabs(plan.at(i).eye[0]), 0.05f) << i;
}

TEST(RenderPaths, FollowSmoothsOverTheVideoFramesOfALongRun) {
  // A sway with a period of 20 frames survives 3-frame smoothing, not that of a video that
  // steps 10 result frames at a time.
  render::Scene s;
  for (int i = 0; i < 200; ++i) {
    s.centres.push_back({0.2f * std::sin(2 * kPi * i / 20), 0, 0.5f * i});
    s.forwards.push_back({0, 0, 1});
  }
  s.depth = 4;
  render::set_bounds(s, {});
  const render::CameraPlan every(s, CameraPath::Follow, 64, 48, 1.0f, 1);
  const render::CameraPlan stepped(s, CameraPath::Follow, 64, 48, 1.0f, 10);
  float sway_every = 0, sway_stepped = 0;
  for (int i = 50; i < 150; ++i) {
    sway_every = std::max(sway_every, std::fabs(every.at(i).eye[0]));
    sway_stepped = std::max(sway_stepped, std::fabs(stepped.at(i).eye[0]));
  }
  EXPECT_GT(sway_every, 0.1f);
  EXPECT_LT(sway_stepped, 0.01f);
}

TEST(RenderPaths, BirdeyeAndStaticFrameEveryCamera) {
  render::Scene s;
  for (int i = 0; i < 20; ++i) {
    s.centres.push_back({std::sin(0.3f * i) * 3, 0.1f * i, 0.8f * i});
    s.forwards.push_back({0, 0, 1});
  }
  s.depth = 2;
  render::set_bounds(s, {});
  for (CameraPath path : {CameraPath::Birdeye, CameraPath::Static}) {
    const render::CameraPlan plan(s, path, 64, 48, 1.0f);
    const View v = plan.at(0);
    EXPECT_EQ(plan.at(19).eye, v.eye) << "a fixed camera";
    if (path == CameraPath::Birdeye) {
      EXPECT_NEAR(v.forward[1], 1, 1e-6) << "looking down (+y)";
      EXPECT_GT(v.down[2], -1.01f);
      EXPECT_NEAR(v.down[2], -1, 1e-6) << "the first camera's forward at the top";
    }
    for (const Vec3& c : s.centres) {
      const render::Projected p = v.project_view(v.to_view(c));
      EXPECT_GT(p.z, 0);
      EXPECT_TRUE(p.u >= 0 && p.u < 64 && p.v >= 0 && p.v < 48) << p.u << " " << p.v;
    }
  }
}

TEST(Render, FramesGrowAlongTheTrajectory) {
  const RunResult run = make_run(8);
  for (CameraPath path : {CameraPath::Follow, CameraPath::Birdeye, CameraPath::Static}) {
    RenderOptions o{.width = 96, .height = 64, .camera = path};
    o.points.stride = 2;
    const Renderer r(run, o);
    EXPECT_EQ(r.frames(), 8);
    EXPECT_EQ(r.points(), 8 * 16 * 12);
    EXPECT_EQ(r.result_frame(3), 3);
    const ImageU8 first = r.render(0), last = r.render(7);
    EXPECT_EQ(first.width, 96);
    EXPECT_EQ(first.height, 64);
    EXPECT_GT(count_not(first, kViewBackground), 0);
    EXPECT_GT(count_not(last, kViewBackground), 0);
    EXPECT_NE(first.rgb, last.rgb);
    if (path != CameraPath::Follow)  // the same camera: later frames only add
      EXPECT_GT(count_not(last, kViewBackground), count_not(first, kViewBackground));
  }
}

TEST(Render, FrustumsAndTrajectoryInCameraColours) {
  // No points (confidence at the threshold): only the cameras are drawn.
  const RunResult run = make_run(2, 1.5f);
  const Renderer r(run, {.width = 128, .height = 96, .camera = CameraPath::Static});
  EXPECT_EQ(r.points(), 0);
  const ImageU8 img = r.render(1);
  int near_first = 0, near_last = 0, other = 0;
  for (int y = 0; y < img.height; ++y)
    for (int x = 0; x < img.width; ++x) {
      const Rgb p = pixel(img, x, y);
      if (p == kViewBackground) continue;
      // Every drawn pixel is a blend of the background and one camera's colour.
      bool blend = false;
      for (int64_t i : {0, 1}) {
        const auto c = camera_colour(i, 2);
        for (int a = 1; a <= 32 && !blend; ++a) {
          Rgb b;
          for (int k = 0; k < 3; ++k)
            b[k] =
                uint8_t(std::lround(kViewBackground[k] + (c[k] - kViewBackground[k]) * a / 32.0));
          blend = distance(p, b) <= 6;
        }
      }
      other += !blend;
      near_first += distance(p, camera_colour(0, 2)) <= 24;
      near_last += distance(p, camera_colour(1, 2)) <= 24;
    }
  // Where lines of the two colours cross, pixels mix them; elsewhere none does.
  EXPECT_LE(other * 10, near_first + near_last) << other;
  EXPECT_GT(near_first, 0);
  EXPECT_GT(near_last, 0);
  // Video frame 0 shows the first camera only.
  const ImageU8 first = r.render(0);
  for (size_t i = 0; i < first.rgb.size(); i += 3)
    EXPECT_GT(distance({first.rgb[i], first.rgb[i + 1], first.rgb[i + 2]}, camera_colour(1, 2)),
              24);
}

TEST(Render, TheSameFramesOnAnyThreadCount) {
  RenderOptions o{.width = 96, .height = 64};
  o.points.stride = 1;  // many overlapping splats: the order threads draw them in varies
  const Renderer r(make_run(6), o);
  const int threads = omp_get_max_threads();
  omp_set_num_threads(1);
  const ImageU8 one = r.render(5);
  omp_set_num_threads(4);
  const ImageU8 four = r.render(5);
  omp_set_num_threads(threads);
  EXPECT_EQ(one.rgb, four.rgb);
}

TEST(Render, BrokenCamerasDrawNothingOfThemselvesButDoNotStopTheRest) {
  RunResult run = make_run(4);
  run.frames[1].intrinsics[0] = INFINITY;  // a field of view of 0, as synthetic weights give
  run.frames[2].c2w[3] = NAN;
  run.frames[2].w2c[3] = NAN;
  for (CameraPath path : {CameraPath::Follow, CameraPath::Birdeye, CameraPath::Static}) {
    const Renderer r(run, {.width = 64, .height = 48, .camera = path});
    EXPECT_GT(count_not(r.render(3), kViewBackground), 0);
  }
}

TEST(Render, LongRunsAreThinnedAndSteppedThrough) {
  const RunResult run = make_run(30);
  RenderOptions o{
      .width = 32, .height = 32, .frames = 4, .max_points_per_frame = 50, .max_points = 600};
  const Renderer r(run, o);
  EXPECT_EQ(r.frames(), 4);
  EXPECT_EQ(r.result_frame(0), 0);
  EXPECT_EQ(r.result_frame(3), 29);
  EXPECT_LE(r.points(), 600);
  EXPECT_GE(r.points(), 30 * 19);
  EXPECT_THROW(r.render(4), Error);
}

TEST(Render, BadOptionsAreErrors) {
  EXPECT_EQ(parse_render_size("1280x720"), (std::pair<int, int>{1280, 720}));
  for (const char* bad : {"", "1280", "1281x720", "x720", "1280x", "-64x64", "8x8", "64x64x2",
                          "99999x64", " 64x64", "64x64 "})
    EXPECT_THROW(parse_render_size(bad), Error) << bad;
  EXPECT_EQ(parse_camera_path("birdeye"), CameraPath::Birdeye);
  EXPECT_THROW(parse_camera_path("orbit"), Error);
  EXPECT_THROW(Renderer(RunResult{}, {}), Error);
  EXPECT_THROW(Renderer(make_run(2), {.width = 8}), Error);
  EXPECT_THROW(Renderer(make_run(2), {.point_size = 0}), Error);
}

using RenderFiles = test::TempDirTest;

TEST_F(RenderFiles, PngFramesAndAnUnwritableFolder) {
  const Renderer r(make_run(3), {.width = 32, .height = 32});
  // A stale longer sequence in the folder is trimmed to this one.
  std::filesystem::create_directories(path("frames"));
  write_png(path("frames/frame_000007.png"), r.render(0));
  const RenderedVideo v = write_video(r, path("frames"), 10);
  EXPECT_FALSE(v.video);
  EXPECT_EQ(v.frames, 3);
  for (int t = 0; t < 3; ++t) {
    const ImageU8 img = load_image(path("frames/") + default_frame_name(t));
    EXPECT_EQ(img.rgb, r.render(t).rgb);
  }
  EXPECT_FALSE(std::filesystem::exists(path("frames/frame_000007.png")));
  { std::ofstream(path("file")) << "x"; }
  EXPECT_THROW(write_video(r, path("file/sub"), 10), Error);
  EXPECT_THROW(write_video(r, path("frames"), 0), Error);
}

TEST_F(RenderFiles, ImagesAreFoundByTheNamesRunGaveThem) {
  RunResult run = make_run(3);
  run.dir = path("");
  EXPECT_EQ(result_image_names(run)(1), "frame_000001.png");  // no images/ at all
  std::filesystem::create_directories(path("images"));
  const ImageU8 img{32, 24, std::vector<uint8_t>(32 * 24 * 3, 7)};
  for (const char* name : {"9.png", "10.png"}) write_png(path("images/") + name, img);
  EXPECT_EQ(result_image_names(run)(1), "frame_000001.png");  // not one per frame
  write_png(path("images/100.png"), img);
  const FrameNamer names = result_image_names(run);  // natural order, as `run` read them
  EXPECT_EQ(names(0), "9.png");
  EXPECT_EQ(names(1), "10.png");
  EXPECT_EQ(names(2), "100.png");
  ASSERT_TRUE(read_result_image(run, 2, names).has_value());
  write_png(path("images/frame_000000.png"), img);
  EXPECT_EQ(result_image_names(run)(2), "frame_000002.png");
}

}  // namespace
}  // namespace lingbot
