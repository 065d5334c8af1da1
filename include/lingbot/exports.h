// Public API: the files a run writes, from its FrameResults as they arrive.
//
//   lingbot::ExportOptions ex{.out_dir = "out", .formats = lingbot::parse_export_list("tum,ply")};
//   auto sinks = lingbot::make_sinks(ex);
//   lingbot::PredictionsWriter predictions("out/predictions.safetensors");
//   auto on_result = [&](const lingbot::FrameResult& r) {
//     predictions.add(r);
//     for (auto& s : sinks) s->add(r, &input_frame_of(r.index));  // rgb may be null
//   };
//   ...; for (auto& s : sinks) s->finish(); predictions.finish();
//
// Outputs for other tools, written while the stream runs: each sink brings its files to a valid
// state after every frame, so an interrupted run keeps what it finished; finish() tidies up.
//
// Layout made by make_sinks under the output folder:
//   trajectory_tum.txt, trajectory_kitti.txt   camera-to-world poses, one line per frame
//   frames.jsonl                               cameras as JSON, one object per line
//   depth/NAME, confidence/NAME, depth_scale.json   16-bit PNG maps
//   depth_f32/NAME.npy, confidence_f32/NAME.npy float32 maps (NAME without its .png)
//   points.ply                                 binary point cloud, world coordinates
//   points.glb                                 glTF 2.0: the same points and camera frusta
//   images/NAME                                the model input (colours for render, colmap...)
//   colmap/{cameras,images,points3D}.txt       COLMAP text model
//   transforms.json                            nerfstudio cameras
//   result.mcap                                ROS 2 messages (MCAP, CDR): poses, TF, maps, points
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "lingbot/engine.h"
#include "lingbot/windowed.h"

namespace lingbot {

class ResultSink {
 public:
  virtual ~ResultSink() = default;
  // rgb: the frame the model saw, [3, H, W], U8 or F32 in [0, 1]; may be null (no colours).
  virtual void add(const FrameResult& result, const Tensor* rgb) = 0;
  virtual void finish() = 0;
  virtual std::string name() const { return "export"; }  // the format, for messages
  // True when this sink's files name files that the sinks before it write for the same frame
  // (COLMAP and nerfstudio list images/ and depth/): whoever runs sinks on separate threads must
  // finish a frame in every earlier sink before this one adds it, so that an interrupted run
  // never lists a file that is not there.
  virtual bool refers_to_earlier() const { return false; }
  // After finish(): what the output left out, for the run's report (frames or points skipped
  // because the format cannot hold non-finite values); empty when nothing.
  virtual std::string notes() const { return {}; }
};

// File name (relative, PNG) of frame `index` in images/, depth/ and confidence/.
using FrameNamer = std::function<std::string(int64_t index)>;
std::string default_frame_name(int64_t index);  // frame_000042.png

// TUM: "timestamp tx ty tz qx qy qz qw"; KITTI: the 12 numbers of c2w, row-major.
enum class TrajectoryFormat { TUM, KITTI };
// timestamp: seconds of frame `index` (TUM only); empty = the frame index.
std::unique_ptr<ResultSink> make_trajectory_sink(const std::string& path, TrajectoryFormat format,
                                                 std::function<double(int64_t)> timestamp = {});

// One JSON object per line: index, keyframe, image, pose_enc, c2w, w2c, intrinsics, width, height.
std::unique_ptr<ResultSink> make_frames_json_sink(const std::string& path, FrameNamer name = {});

struct DepthPngOptions {
  // Stored value = round(x * scale), clamped to [0, 65535]; NaN gives 0.
  float depth_scale = 1000;      // resolution 1e-3, range 65.5 in the model's depth units
  float confidence_scale = 100;  // confidence is 1 + exp(.) >= 1: resolution 0.01, up to 655
};
// Writes DIR/depth/NAME, DIR/confidence/NAME and DIR/depth_scale.json.
std::unique_ptr<ResultSink> make_depth_png_sink(const std::string& dir,
                                                DepthPngOptions options = {}, FrameNamer name = {});

struct PointOptions {
  float conf_threshold = 1.5f;  // keep pixels with confidence above this (the reference viewer's)
  int stride = 4;               // every stride-th column of every stride-th row
  // > 0: at most one point per cube of a grid whose edge is `voxel` times the median depth of
  // the run's first frame (0.01: 1 %), the first point to land in the cube, so that a long run's
  // cloud grows with the scene rather than with its frames. Each export remembers up to
  // 4,194,304 cubes (8 bytes a cube, at most 34 MB); beyond, a cube forgotten since may take a
  // point again.
  float voxel = 0;
};
// Binary little-endian PLY: float x y z, uchar red green blue, float confidence.
std::unique_ptr<ResultSink> make_ply_sink(const std::string& path, PointOptions options = {});

// Float32 maps as NumPy .npy ('<f4', shape (H, W)): DIR/depth_f32/NAME.npy and
// DIR/confidence_f32/NAME.npy, NAME being `name`'s with .npy for its extension.
std::unique_ptr<ResultSink> make_depth_npy_sink(const std::string& dir, FrameNamer name = {});

// Binary glTF 2.0: the PLY's points (a POINTS mesh, COLOR_0 as normalized RGBA8) and a LINES
// frustum per camera (every frame up to 512, then every k-th), in the world frame. Kept in
// memory and rewritten whole every 16 or more frames (see glb.cpp), so valid after a kill.
std::unique_ptr<ResultSink> make_glb_sink(const std::string& path, PointOptions options = {});

// The model input as 8-bit PNG: DIR/NAME.
std::unique_ptr<ResultSink> make_image_sink(const std::string& dir, FrameNamer name = {});

// COLMAP text model in DIR (one PINHOLE camera per frame, points with empty tracks); image
// names are `name`'s, to be found in whatever folder make_image_sink filled.
std::unique_ptr<ResultSink> make_colmap_sink(const std::string& dir, PointOptions options = {},
                                             FrameNamer name = {});

struct NerfstudioOptions {
  std::string image_dir = "images";  // relative to the transforms.json folder
  std::string depth_dir;             // when set: depth_file_path per frame (16-bit PNG)
  std::string ply_file;              // when set: ply_file_path (initial points)
};
std::unique_ptr<ResultSink> make_nerfstudio_sink(const std::string& path,
                                                 NerfstudioOptions options = {},
                                                 FrameNamer name = {});

// A ROS 2 bag in MCAP (the storage of rosbag2 since Iron; Foxglove opens it): CDR messages with
// their full ros2msg definitions, in zstd chunks, indexed at finish() and readable up to the last
// complete chunk before it. Per frame: /tf (map -> lingbot_camera -> lingbot_camera_optical),
// /lingbot/odometry, /lingbot/camera_info, /lingbot/depth and /lingbot/confidence (32FC1),
// /lingbot/image (JPEG, when the frame is given); /lingbot/points per keyframe (the PLY's points,
// in map); /lingbot/path at most once a second of stream time and at the end. Frames whose pose is
// not finite are skipped (notes()). Throws Error in builds without zstd.
struct McapOptions {
  PointOptions points;
  // Seconds of frame `index` (a video's clock); empty or non-finite = index / frame_rate.
  std::function<double(int64_t)> timestamp;
  double frame_rate = 10;
};
std::unique_ptr<ResultSink> make_mcap_sink(const std::string& path, McapOptions options = {});

// A set of exports under one folder.
struct ExportOptions {
  std::string out_dir;
  std::vector<std::string> formats;  // from parse_export_list
  PointOptions points;
  DepthPngOptions depth;
  FrameNamer name;  // empty = default_frame_name
  // Seconds of frame `index` for the TUM trajectory (a video's clock); empty = the index.
  std::function<double(int64_t)> timestamp;
  // Cameras of frames before this run's (a continued session's, without maps): the camera-only
  // exports (tum, kitti, json) begin with them.
  std::vector<FrameResult> history;
  // Frames a second for the MCAP stamps of a source without times (a folder of pictures).
  double frame_rate = 10;
};

// "tum,kitti,json,depth,depth_f32,ply,glb,images,colmap,nerfstudio,mcap", "all" (every one but
// mcap, which holds the others' content again) or "none" (or empty); throws Error naming an
// unknown entry.
std::vector<std::string> parse_export_list(const std::string& list);

// The files and folders (relative to the output folder) that a run writes there: run.json,
// predictions.safetensors and its partial files, and every export's. A folder holding any of
// them holds a run; replacing it removes these and nothing else (remove_run_outputs).
const std::vector<std::string>& run_output_names();
// Those of run_output_names() present in `dir`.
std::vector<std::string> existing_run_outputs(const std::string& dir);
// Removes them from `dir`; throws Error naming the first that cannot be removed.
void remove_run_outputs(const std::string& dir);

// In an order in which every sink that refers_to_earlier() comes after the files it names.
std::vector<std::unique_ptr<ResultSink>> make_sinks(const ExportOptions& options);

// Writes predictions.safetensors: pose_enc [S, 9], c2w and w2c [S, 3, 4], intrinsics [S, 3, 3],
// depth and depth_conf [S, H, W] (all F32), frame_type U8 [S] (0 scale frame, 1 keyframe, 2
// non-keyframe) and is_keyframe Bool [S]; windowed runs add chunk_scales [W] and chunk_transforms
// [W, 4, 4] from their windows' alignments; loop-closed runs (set_optimized) c2w_optimized and
// w2c_optimized [S, 3, 4] (rigid: [R | t] and its inverse) and scale_optimized [S]: frame i's
// optimized camera maps a camera point p of the streamed depth to R (scale_optimized[i] p) + t.
// Depth and confidence go to disk frame by frame (into PATH.partial and PATH.conf.partial beside
// the file), so that a run of any length keeps only the cameras in memory (about 170 bytes a
// frame); finish() assembles the file from them. The file is complete or absent afterwards: a
// writer destroyed before finish() (a failed run) removes its partial files, and one that got no
// frame writes none. add_window may be called from another thread than add and finish (a run's
// device thread, beside the output thread).
class PredictionsWriter : public ResultSink {
 public:
  explicit PredictionsWriter(const std::string& path);
  ~PredictionsWriter() override;
  void add(const FrameResult& r, const Tensor* rgb = nullptr) override;
  void add_window(const WindowAlignment& w);
  // The loop-closed poses of every frame (c2w row-major 3x4, without the scale, and the scale),
  // before finish(), from any thread; frames beyond them keep their streamed pose.
  void set_optimized(std::vector<std::array<float, 12>> c2w, std::vector<float> scale);
  void finish() override;
  std::string name() const override { return "predictions"; }

 private:
  struct State;
  std::unique_ptr<State> s_;
};

}  // namespace lingbot
