// `lingbot-map run` on video files and streams: clips encoded by the test, outputs parsed back,
// sampling options, and one clear line for each kind of bad source.
#include <gtest/gtest.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <csignal>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <random>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "sinks_test_util.h"
#include "test_util.h"
#include "video_test_util.h"
#include "weights/safetensors.h"

namespace lingbot {
namespace {

namespace fs = std::filesystem;

// The lines of a file that are neither empty nor comments.
std::vector<std::string> data_lines(const std::string& path) {
  std::vector<std::string> out = test::lines_of(path);
  std::erase_if(out, [](const std::string& l) { return l.empty() || l[0] == '#'; });
  return out;
}

// First column of each TUM line, rounded to 0.1 s.
std::vector<double> tum_times(const std::string& path) {
  std::vector<double> t;
  for (const auto& l : data_lines(path)) t.push_back(std::round(std::stod(l) * 10) / 10);
  return t;
}

class VideoCli : public test::TempDirTest {
 protected:
  static std::string tiny() {
    return "run --model synthetic:1 --arch tiny --scale-frames 4 --window 6 --quiet ";
  }
  // The frames `out` holds results of: the predictions' count, after checking that every export
  // asked for by the failure tests agrees with it and is a complete file.
  int64_t complete_outputs(const std::string& out) {
    const auto t = read_safetensors(out + "/predictions.safetensors").tensors;
    const int64_t n = t.at("pose_enc").dim(0);
    EXPECT_EQ(t.at("depth").dim(0), n);
    EXPECT_EQ(static_cast<int64_t>(data_lines(out + "/trajectory_tum.txt").size()), n);
    EXPECT_EQ(static_cast<int64_t>(data_lines(out + "/frames.jsonl").size()), n);
    const test::PlyCloud ply = test::read_ply(out + "/points.ply");
    EXPECT_TRUE(ply.ok);
    EXPECT_EQ(ply.extra_bytes, 0);  // finished: truncated to the counted points
    const test::Glb glb = test::read_glb(out + "/points.glb");
    EXPECT_TRUE(glb.ok()) << glb.error;
    if (glb.ok()) EXPECT_EQ(glb.json["asset"]["extras"]["frames"].get<int64_t>(), n);
    return n;
  }
  static constexpr const char* kExports = " --export tum,json,ply,glb --out ";

  // `run` over 2,000 frames (links to the fixture's 16) in a child process, sent `sig` once
  // `after` results are in frames.jsonl: its exit status and output.
  test::CliResult interrupted_run(const std::string& options, int sig, size_t after) {
    std::vector<fs::path> src;
    for (const auto& e : fs::directory_iterator(test::fixtures_dir() + "/tiny/frames"))
      src.push_back(e.path());
    std::sort(src.begin(), src.end());
    fs::create_directories(path("frames"));
    for (size_t i = 0; i < 2000; ++i) {
      char name[32];
      std::snprintf(name, sizeof name, "frames/f%05zu.png", i);
      fs::create_symlink(src[i % src.size()], path(name));
    }
    const std::string log = path("log");
    const std::string cmd = "exec " + std::string(LINGBOT_CLI) + " " + tiny() + "--input " +
                            path("frames") + " --preprocess none" + options + kExports +
                            path("out") + " >" + log + " 2>&1";
    const pid_t pid = ::fork();
    if (pid == 0) {
      // As from a terminal, whatever the test runner ignores.
      std::signal(SIGINT, SIG_DFL);
      std::signal(SIGTERM, SIG_DFL);
      ::execl("/bin/sh", "sh", "-c", cmd.c_str(), static_cast<char*>(nullptr));
      ::_exit(127);
    }
    int status = 0;
    bool ended = false;
    const auto deadline = std::chrono::steady_clock::now() + std::chrono::minutes(2);
    while (!ended && std::chrono::steady_clock::now() < deadline &&
           data_lines(path("out/frames.jsonl")).size() < after) {
      ended = ::waitpid(pid, &status, WNOHANG) == pid;
      std::this_thread::sleep_for(std::chrono::milliseconds(20));
    }
    if (!ended) {
      ::kill(pid, sig);
      ::waitpid(pid, &status, 0);
    }
    std::ifstream f(log);
    const std::string out((std::istreambuf_iterator<char>(f)), std::istreambuf_iterator<char>());
    EXPECT_FALSE(ended) << "the run ended before the signal: " << out;
    return {WIFEXITED(status) ? WEXITSTATUS(status) : -1, out};
  }
  // No partial file is left behind in `dir`.
  static void expect_no_partial_files(const std::string& dir) {
    for (const auto& e : fs::directory_iterator(dir))
      EXPECT_EQ(e.path().string().find(".partial"), std::string::npos) << e.path();
  }
};

// Ctrl-C part way through a folder ends the input there: the frames read so far are finished and
// every output holds them, predictions.safetensors included; a line says so, exit status 130
// (a live source, whose normal end Ctrl-C is, exits 0).
TEST_F(VideoCli, CtrlCPartWayWritesEveryOutputOfTheFramesBeforeIt) {
  const test::CliResult r = interrupted_run("", SIGINT, 8);
  EXPECT_EQ(r.code, 130) << r.output;
  const int64_t n = complete_outputs(path("out"));
  EXPECT_GE(n, 8);
  EXPECT_LT(n, 2000);
  EXPECT_EQ(r.output.rfind("lingbot-map: stopping: the frames read are finished", 0), 0u)
      << r.output;  // said when the signal came
  EXPECT_NE(r.output.find("lingbot-map: interrupted after " + std::to_string(n) +
                          " frames; their results are in " + path("out") + "/\n"),
            std::string::npos)
      << r.output;
  expect_no_partial_files(path("out"));
}

// SIGTERM in windowed mode: the window it ends stops there, as at the end of a source, and the
// windows are aligned and written as for the frames before it.
TEST_F(VideoCli, SigtermPartWayInWindowedModeWritesTheWindowsBeforeIt) {
  const test::CliResult r =
      interrupted_run(" --mode windowed --window-size 6 --overlap 2", SIGTERM, 10);
  EXPECT_EQ(r.code, 130) << r.output;
  const int64_t n = complete_outputs(path("out"));
  EXPECT_GE(n, 10);
  EXPECT_LT(n, 2000);
  EXPECT_NE(r.output.find("interrupted after " + std::to_string(n) + " frames"), std::string::npos)
      << r.output;
  const auto t = read_safetensors(path("out/predictions.safetensors")).tensors;
  EXPECT_GE(t.at("chunk_scales").dim(0), 3);  // windows [0, 6), [4, 10), [8, 14), ...
  expect_no_partial_files(path("out"));
}

// An unreadable image part way through a folder: the frames before it are processed and written
// (predictions and every export complete), then one error line and exit 1.
TEST_F(VideoCli, UnreadableFramePartWayKeepsTheFramesBeforeIt) {
  fs::create_directories(path("frames"));
  for (const auto& e : fs::directory_iterator(test::fixtures_dir() + "/tiny/frames"))
    fs::copy_file(e.path(), path("frames/" + e.path().filename().string()));
  std::ofstream(path("frames/010.png"), std::ios::trunc) << "\x89PNG\r\n\x1a\n damaged";
  const test::CliResult r = test::run_cli(tiny() + "--input " + path("frames") +
                                          " --preprocess none" + kExports + path("out"));
  EXPECT_EQ(r.code, 1) << r.output;
  EXPECT_EQ(std::count(r.output.begin(), r.output.end(), '\n'), 1) << r.output;
  EXPECT_EQ(r.output.rfind("lingbot-map: error: " + path("frames/010.png"), 0), 0u) << r.output;
  EXPECT_NE(r.output.find("; the results of the 10 frames before it are in " + path("out") + "/"),
            std::string::npos)
      << r.output;
  EXPECT_EQ(complete_outputs(path("out")), 10);
}

// The same in windowed mode (windows [0, 6), [4, 10), [8, 14), [12, 16)): the two windows before
// the damaged frame 12 and the part of the third that came before it are stitched and written,
// exactly as a run given only frames 0-11 stitches them, then one error line and exit 1.
TEST_F(VideoCli, UnreadableFramePartWayKeepsTheWindowsBeforeIt) {
  fs::create_directories(path("frames"));
  fs::create_directories(path("first12"));
  for (const auto& e : fs::directory_iterator(test::fixtures_dir() + "/tiny/frames")) {
    const std::string name = e.path().filename().string();
    fs::copy_file(e.path(), path("frames/" + name));
    if (name < "012.png") fs::copy_file(e.path(), path("first12/" + name));
  }
  std::ofstream(path("frames/012.png"), std::ios::trunc) << "\x89PNG\r\n\x1a\n damaged";
  const std::string windowed = " --preprocess none --mode windowed --window-size 6 --overlap 2";
  const test::CliResult r =
      test::run_cli(tiny() + "--input " + path("frames") + windowed + kExports + path("out"));
  EXPECT_EQ(r.code, 1) << r.output;
  EXPECT_EQ(std::count(r.output.begin(), r.output.end(), '\n'), 1) << r.output;
  EXPECT_EQ(r.output.rfind("lingbot-map: error: " + path("frames/012.png"), 0), 0u) << r.output;
  EXPECT_NE(r.output.find("; the results of the 12 frames before it are in " + path("out") + "/"),
            std::string::npos)
      << r.output;
  EXPECT_EQ(complete_outputs(path("out")), 12);

  const test::CliResult whole =
      test::run_cli(tiny() + "--input " + path("first12") + windowed + " --out " + path("want"));
  ASSERT_EQ(whole.code, 0) << whole.output;
  const auto got = read_safetensors(path("out/predictions.safetensors")).tensors;
  const auto want = read_safetensors(path("want/predictions.safetensors")).tensors;
  for (const char* name : {"pose_enc", "depth", "depth_conf", "c2w", "chunk_scales"}) {
    ASSERT_EQ(got.at(name).shape(), want.at(name).shape()) << name;
    EXPECT_LE(test::compare(got.at(name), want.at(name)).relative(), 1e-6) << name;
  }
  EXPECT_EQ(got.at("chunk_scales").dim(0), 3);
}

#if LINGBOT_HAVE_FFMPEG

TEST_F(VideoCli, RunsOnAVideoFileAndExportsEverything) {
  ASSERT_EQ(test::encode_test_video(path("clip.mp4"), 112, 84, 12, 10), "");
  const test::CliResult r = test::run_cli(tiny() + "--input " + path("clip.mp4") +
                                          " --size 70 --export all --out " + path("out"));
  ASSERT_EQ(r.code, 0) << r.output;
  const auto t = read_safetensors(path("out/predictions.safetensors")).tensors;
  EXPECT_EQ(t.at("pose_enc").shape(), (Shape{12, 9}));
  EXPECT_EQ(t.at("depth").shape(), (Shape{12, 56, 70}));  // 112x84 cropped to width 70
  // TUM stamps are the frames' times in the video.
  EXPECT_EQ(tum_times(path("out/trajectory_tum.txt")),
            (std::vector<double>{0, 0.1, 0.2, 0.3, 0.4, 0.5, 0.6, 0.7, 0.8, 0.9, 1.0, 1.1}));
  EXPECT_EQ(data_lines(path("out/trajectory_kitti.txt")).size(), 12u);
  const auto json = data_lines(path("out/frames.jsonl"));
  ASSERT_EQ(json.size(), 12u);
  EXPECT_EQ(nlohmann::json::parse(json[11])["index"], 11);
  std::ifstream ply(path("out/points.ply"), std::ios::binary);
  std::string magic, format;
  std::getline(ply, magic);
  std::getline(ply, format);
  EXPECT_EQ(magic, "ply");
  EXPECT_EQ(format, "format binary_little_endian 1.0");
  // COLMAP lists the frames whose cameras are finite (the tiny synthetic model's field of view
  // can be 0: an infinite focal length, written as null in frames.jsonl).
  size_t finite = 0;
  for (const std::string& line : json) {
    const auto f = nlohmann::json::parse(line);
    bool ok = true;
    for (const char* key : {"intrinsics", "c2w", "w2c", "pose_enc"})
      for (const auto& v : f[key]) ok = ok && !v.is_null();
    finite += ok;
  }
  EXPECT_EQ(data_lines(path("out/colmap/cameras.txt")).size(), finite);
  EXPECT_EQ(data_lines(path("out/colmap/images.txt")).size(), finite);  // + empty 2D-point lines
  EXPECT_TRUE(fs::exists(path("out/colmap/points3D.txt")));
  EXPECT_TRUE(fs::exists(path("out/transforms.json")));
  for (const char* dir : {"depth", "confidence", "images"}) {
    EXPECT_EQ(std::distance(fs::directory_iterator(path("out/") + dir), fs::directory_iterator{}),
              12)
        << dir;
    EXPECT_TRUE(fs::exists(path("out/") + dir + "/frame_000011.png")) << dir;
  }
}

TEST_F(VideoCli, FpsFirstKAndStrideSampleTheVideo) {
  ASSERT_EQ(test::encode_test_video(path("clip.avi"), 70, 56, 12, 10, "mjpeg"), "");
  const std::string base =
      tiny() + "--input " + path("clip.avi") + " --preprocess none --export tum ";
  auto run = [&](const std::string& opts, const std::string& out) {
    const test::CliResult r = test::run_cli(base + opts + " --out " + path(out));
    EXPECT_EQ(r.code, 0) << r.output;
    return tum_times(path(out + "/trajectory_tum.txt"));
  };
  EXPECT_EQ(run("--fps 5", "a"), (std::vector<double>{0, 0.2, 0.4, 0.6, 0.8, 1.0}));
  EXPECT_EQ(run("--fps 5 --stride 2", "b"), (std::vector<double>{0, 0.4, 0.8}));
  EXPECT_EQ(run("--fps 0 --first-k 5 --stride 2", "c"), (std::vector<double>{0, 0.2, 0.4}));
}

TEST_F(VideoCli, WindowedModeReadsAVideoWithoutHoldingIt) {
  ASSERT_EQ(test::encode_test_video(path("clip.mkv"), 70, 56, 12, 10, "ffv1"), "");
  const test::CliResult r =
      test::run_cli(tiny() + "--input " + path("clip.mkv") +
                    " --preprocess none --mode windowed --window-size 8 --overlap 4 --export tum,"
                    "colmap --out " +
                    path("win"));
  ASSERT_EQ(r.code, 0) << r.output;
  const auto t = read_safetensors(path("win/predictions.safetensors")).tensors;
  EXPECT_EQ(t.at("pose_enc").shape(), (Shape{12, 9}));
  EXPECT_EQ(tum_times(path("win/trajectory_tum.txt")).back(), 1.1);
  EXPECT_TRUE(fs::exists(path("win/images/frame_000011.png")));
}

// A file played at its own rate goes through the live path: the model drops behind a 20 frames/s
// source, the oldest waiting frames are dropped, and the count is reported.
TEST_F(VideoCli, RealtimeSourceReportsDroppedFrames) {
  ASSERT_EQ(test::encode_test_video(path("clip.avi"), 70, 56, 24, 20, "mjpeg"), "");
  const test::CliResult r =
      test::run_cli(tiny() + "--input " + path("clip.avi") +
                    " --preprocess none --realtime --export tum --out " + path("live"));
  ASSERT_EQ(r.code, 0) << r.output;
  const size_t at = r.output.find(" frames dropped");
  ASSERT_NE(at, std::string::npos) << r.output;
  const int dropped = std::stoi(r.output.substr(r.output.rfind('\n', at) + 1));
  EXPECT_EQ(static_cast<int>(data_lines(path("live/trajectory_tum.txt")).size()) + dropped, 24);
}

// A stream that stops part way, a camera unplugged: the source fails after delivering frames.
// The frames it delivered are processed and written, then one error line and exit 1 (before,
// avio's end-of-input flag hid the failure and the run ended as if the stream had).
TEST_F(VideoCli, LiveSourceFailingPartWayKeepsWhatItDeliveredAndFails) {
  ASSERT_EQ(test::encode_test_video(path("clip.avi"), 70, 56, 120, 10, "mjpeg"), "");
  std::ifstream f(path("clip.avi"), std::ios::binary);
  const std::string clip((std::istreambuf_iterator<char>(f)), std::istreambuf_iterator<char>());
  // A server that sends the first half of the clip, then nothing, until the client hangs up.
  const int listener = ::socket(AF_INET, SOCK_STREAM, 0);
  ASSERT_GE(listener, 0);
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  socklen_t len = sizeof addr;
  ASSERT_EQ(::bind(listener, reinterpret_cast<sockaddr*>(&addr), sizeof addr), 0);
  ASSERT_EQ(::listen(listener, 1), 0);
  ASSERT_EQ(::getsockname(listener, reinterpret_cast<sockaddr*>(&addr), &len), 0);
  std::thread server([&] {
    pollfd p{listener, POLLIN, 0};
    if (::poll(&p, 1, 60000) != 1) return;
    const int c = ::accept(listener, nullptr, nullptr);
    if (c < 0) return;
    ::send(c, clip.data(), clip.size() / 2, MSG_NOSIGNAL);
    char buf[256];
    pollfd q{c, POLLIN, 0};
    while (::poll(&q, 1, 60000) == 1 && ::recv(c, buf, sizeof buf, 0) > 0) {
    }
    ::close(c);
  });
  const std::string url = "tcp://127.0.0.1:" + std::to_string(ntohs(addr.sin_port));
  const test::CliResult r =
      test::run_cli(tiny() + "--input " + url + " --preprocess none" + kExports + path("out"));
  server.join();
  ::close(listener);
  EXPECT_EQ(r.code, 1) << r.output;
  EXPECT_EQ(std::count(r.output.begin(), r.output.end(), '\n'), 1) << r.output;
  EXPECT_EQ(r.output.rfind("lingbot-map: error: " + url + ": reading failed (", 0), 0u) << r.output;
  EXPECT_NE(r.output.find("frames before it are in " + path("out") + "/"), std::string::npos)
      << r.output;
  // The model is slower than the source: frames were dropped, but some were processed.
  const int64_t n = complete_outputs(path("out"));
  EXPECT_GT(n, 0);
  EXPECT_LT(n, 60);
  EXPECT_NE(r.output.find("the results of the " + std::to_string(n) + " frames"), std::string::npos)
      << r.output;
}

// Damaged video files, as FFmpeg reads them: a file cut short ends where it was cut, and packets
// the decoder cannot decode are skipped (as the ffmpeg tool does). FFmpeg reports neither as an
// error, so the run succeeds with the frames that could be read, and its outputs agree on them.
// (An MP4 written front to back keeps its index at the end; cut short, it cannot be opened, which
// is the one-line failure of BadSourcesFailWithOneLine.)
TEST_F(VideoCli, DamagedVideoFilesRunOnTheFramesFFmpegCanRead) {
  ASSERT_EQ(test::encode_test_video(path("clip.avi"), 70, 56, 24, 10, "mjpeg"), "");
  ASSERT_EQ(test::encode_test_video(path("clip.mkv"), 70, 56, 24, 10, "ffv1"), "");
  fs::copy_file(path("clip.avi"), path("cut.avi"));
  fs::resize_file(path("cut.avi"), fs::file_size(path("clip.avi")) / 2);
  fs::copy_file(path("clip.mkv"), path("noisy.mkv"));
  {
    const auto size = fs::file_size(path("clip.mkv"));
    std::fstream m(path("noisy.mkv"), std::ios::in | std::ios::out | std::ios::binary);
    m.seekp(static_cast<std::streamoff>(size / 2));
    const std::string junk(size / 8, '\xff');
    m.write(junk.data(), static_cast<std::streamsize>(junk.size()));
  }
  for (const char* name : {"cut.avi", "noisy.mkv"}) {
    SCOPED_TRACE(name);
    const std::string out = path(std::string(name) + ".out");
    const test::CliResult r = test::run_cli(tiny() + "--input " + path(name) +
                                            " --preprocess none --fps 0" + kExports + out);
    ASSERT_EQ(r.code, 0) << r.output;
    const int64_t n = complete_outputs(out);
    EXPECT_GT(n, 4);
    EXPECT_LT(n, 24);  // the frames in the damaged part are missing
  }
}

TEST_F(VideoCli, BadSourcesFailWithOneLine) {
  const std::string base = tiny() + "--out " + path("x") + " --input ";
  test::expect_clean_cli_failure(base + path("absent.mp4"), "absent.mp4");
  std::ofstream(path("empty.mp4")).flush();
  test::expect_clean_cli_failure(base + path("empty.mp4"), "empty.mp4");
  std::mt19937 rng(7);
  std::string noise(50000, '\0');
  for (char& c : noise) c = static_cast<char>(rng());
  std::ofstream(path("noise.mp4"), std::ios::binary) << noise;
  test::expect_clean_cli_failure(base + path("noise.mp4"), "noise.mp4");
  test::write_silent_wav(path("sound.wav"));
  test::expect_clean_cli_failure(base + path("sound.wav"), "no video stream");
  std::ofstream(path("notes.txt")) << "not a video\n";
  test::expect_clean_cli_failure(base + path("notes.txt"), "notes.txt");
  std::ofstream(path("photo.png")) << "x";
  test::expect_clean_cli_failure(base + path("photo.png"), "photo.png");
  test::expect_clean_cli_failure(base + "rtsp://127.0.0.1:9/none", "rtsp://127.0.0.1:9/none");
  ASSERT_EQ(test::encode_test_video(path("clip.avi"), 70, 56, 4, 10, "mjpeg"), "");
  test::expect_clean_cli_failure(base + path("clip.avi") + " --realtime --mode windowed",
                                 "live source");
}

#else

TEST_F(VideoCli, BuildsWithoutFFmpegSayWhyVideoFails) {
  std::ofstream(path("clip.mp4")) << "x";
  test::expect_clean_cli_failure(tiny() + "--input " + path("clip.mp4") + " --out " + path("x"),
                                 "this build has no video support");
}

#endif

// --first-k and --stride thin a folder too, in the reference demo's order.
TEST_F(VideoCli, FolderFirstKAndStride) {
  const test::CliResult r = test::run_cli(
      tiny() + "--input " + test::fixtures_dir() +
      "/tiny/frames --preprocess none --first-k 10 --stride 3 --export json --out " + path("f"));
  ASSERT_EQ(r.code, 0) << r.output;
  std::vector<std::string> images;
  for (const auto& l : data_lines(path("f/frames.jsonl")))
    images.push_back(nlohmann::json::parse(l)["image"]);
  EXPECT_EQ(images, (std::vector<std::string>{"000.png", "003.png", "006.png", "009.png"}));
}

}  // namespace
}  // namespace lingbot
