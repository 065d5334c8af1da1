// `run --save-session`, `run --resume` (continue and relocalize) and `inspect` on a snapshot: a
// run cut in two and resumed writes what the whole run writes; a snapshot is saved on SIGTERM
// after the last complete frame; a foreign or truncated snapshot is one clear line.
#include <gtest/gtest.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <csignal>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <string>
#include <thread>
#include <vector>

#include "lingbot/engine.h"
#include "test_util.h"
#include "weights/safetensors.h"

namespace lingbot {
namespace {

namespace fs = std::filesystem;

using test::lines_of;

class SessionCli : public test::TempDirTest {
 protected:
  // A folder of links to the fixture's frames [begin, end), in order.
  std::string frames(const std::string& name, size_t begin, size_t end) {
    std::vector<fs::path> src;
    for (const auto& e : fs::directory_iterator(test::fixtures_dir() + "/tiny/frames"))
      src.push_back(e.path());
    std::sort(src.begin(), src.end());
    fs::create_directories(path(name));
    for (size_t i = begin; i < end; ++i) {
      char file[32];
      std::snprintf(file, sizeof file, "/f%05zu.png", i);
      fs::create_symlink(src[i % src.size()], path(name) + file);
    }
    return path(name);
  }
  static std::string tiny() {
    return "run --model synthetic:1 --arch tiny --preprocess none --scale-frames 4 --window 6 "
           "--quiet --export tum,json ";
  }
};

TEST_F(SessionCli, ResumedRunWritesWhatTheWholeRunWrites) {
  const std::string all = frames("all", 0, 16), first = frames("first", 0, 9),
                    rest = frames("rest", 9, 16);
  test::CliResult r = test::run_cli(tiny() + "--input " + all + " --out " + path("whole"));
  ASSERT_EQ(r.code, 0) << r.output;
  r = test::run_cli(tiny() + "--input " + first + " --out " + path("a") + " --save-session " +
                    path("s.lbs"));
  ASSERT_EQ(r.code, 0) << r.output;
  EXPECT_NE(r.output.find("session saved to " + path("s.lbs") + " (9 frames, "), std::string::npos)
      << r.output;

  // inspect tells the snapshot from a checkpoint.
  r = test::run_cli("inspect " + path("s.lbs"));
  ASSERT_EQ(r.code, 0) << r.output;
  EXPECT_NE(r.output.find("lingbot session snapshot (version 1)"), std::string::npos) << r.output;
  EXPECT_NE(r.output.find("model: tiny"), std::string::npos) << r.output;
  EXPECT_NE(r.output.find("frames: 9 pushed, 9 kept by the KV cache: 4 scale frames, 5 in the "
                          "window, 0 evicted"),
            std::string::npos)
      << r.output;
  EXPECT_NE(r.output.find("frame size: 70x56; trajectory: 9 cameras"), std::string::npos)
      << r.output;

  // Continued: the camera files hold the whole sequence, exactly the whole run's.
  r = test::run_cli(tiny() + "--input " + rest + " --out " + path("b") + " --resume " +
                    path("s.lbs"));
  ASSERT_EQ(r.code, 0) << r.output;
  EXPECT_NE(r.output.find("continued " + path("s.lbs") + " (9 saved frames, read in "),
            std::string::npos)
      << r.output;
  EXPECT_NE(r.output.find("): frames 9 to 15 placed against its map"), std::string::npos)
      << r.output;
  const std::vector<std::string> whole = lines_of(path("whole/trajectory_tum.txt"));
  ASSERT_EQ(whole.size(), 16u);
  EXPECT_EQ(lines_of(path("b/trajectory_tum.txt")), whole);
  std::vector<std::string> json = lines_of(path("b/frames.jsonl"));
  const std::vector<std::string> whole_json = lines_of(path("whole/frames.jsonl"));
  ASSERT_EQ(json.size(), 16u);
  for (size_t i = 0; i < 16; ++i) {
    // The saved frames keep default names; the new ones are the new folder's files.
    const auto camera = [](const std::string& line) {
      return line.substr(line.find("\"pose_enc\""));
    };
    EXPECT_EQ(camera(json[i]), camera(whole_json[i])) << i;
  }
  // The maps of the new frames, bit for bit the whole run's last 7.
  const TensorMap b = read_safetensors(path("b/predictions.safetensors")).tensors;
  const TensorMap w = read_safetensors(path("whole/predictions.safetensors")).tensors;
  ASSERT_EQ(b.at("depth").dim(0), 7);
  for (const char* name : {"pose_enc", "depth", "depth_conf"}) {
    const Tensor& got = b.at(name);
    const Tensor want = w.at(name).slice(9, 16);
    EXPECT_EQ(std::memcmp(got.raw(), want.raw(), got.nbytes()), 0) << name;
  }

  // Relocalized: the same cameras for the new frames, numbered from 0, and none of the saved.
  r = test::run_cli(tiny() + "--input " + rest + " --out " + path("c") + " --resume " +
                    path("s.lbs") + " --resume-mode relocalize --json " + path("c.json"));
  ASSERT_EQ(r.code, 0) << r.output;
  EXPECT_NE(r.output.find("relocalized in " + path("s.lbs") + " (9 saved frames, read in "),
            std::string::npos)
      << r.output;
  EXPECT_NE(r.output.find("): frames 0 to 6 placed against its map"), std::string::npos)
      << r.output;
  const std::vector<std::string> reloc = lines_of(path("c/trajectory_tum.txt"));
  ASSERT_EQ(reloc.size(), 7u);
  for (size_t i = 0; i < 7; ++i) {
    EXPECT_EQ(reloc[i].substr(0, reloc[i].find(' ')), std::to_string(i));
    EXPECT_EQ(reloc[i].substr(reloc[i].find(' ')), whole[9 + i].substr(whole[9 + i].find(' ')));
  }
  std::ifstream report(path("c.json"));
  const std::string text((std::istreambuf_iterator<char>(report)), {});
  EXPECT_NE(text.find("\"resumed\":{\"saved_frames\":9,\"mode\":\"relocalize\",\"first_frame\":0,"
                      "\"frames_placed_against_saved_map\":7,"),
            std::string::npos)
      << text;
}

TEST_F(SessionCli, ForeignAndTruncatedSnapshotsAreOneLine) {
  const std::string first = frames("first", 0, 5), rest = frames("rest", 5, 7);
  test::CliResult r = test::run_cli(tiny() + "--input " + first + " --out " + path("a") +
                                    " --save-session " + path("s.lbs"));
  ASSERT_EQ(r.code, 0) << r.output;
  test::expect_clean_cli_failure(
      "run --model synthetic:2 --arch tiny --preprocess none --quiet --input " + rest + " --out " +
          path("b") + " --resume " + path("s.lbs"),
      "this session was saved by tiny");
  fs::copy_file(path("s.lbs"), path("cut.lbs"));
  fs::resize_file(path("cut.lbs"), fs::file_size(path("cut.lbs")) - 100);
  test::expect_clean_cli_failure(
      tiny() + "--input " + rest + " --out " + path("c") + " --resume " + path("cut.lbs"),
      "cut.lbs: not a usable session snapshot");
  test::expect_clean_cli_failure("inspect " + path("cut.lbs"), "cut.lbs");
  test::expect_clean_cli_failure(tiny() + "--input " + rest + " --out " + path("d") + " --resume " +
                                     path("s.lbs") + " --resume-mode sideways",
                                 "--resume-mode");
}

// SIGTERM part way: the run finishes the frames read, then saves the session after the last
// complete frame; resuming it goes on from there.
TEST_F(SessionCli, SigtermSavesTheSessionAfterTheLastCompleteFrame) {
  const std::string many = frames("many", 0, 400);
  const std::string cmd = "exec " + std::string(LINGBOT_CLI) + " " + tiny() + "--input " + many +
                          " --out " + path("out") + " --save-session " + path("s.lbs") + " >" +
                          path("log") + " 2>&1";
  const pid_t pid = ::fork();
  if (pid == 0) {
    std::signal(SIGTERM, SIG_DFL);
    ::execl("/bin/sh", "sh", "-c", cmd.c_str(), static_cast<char*>(nullptr));
    ::_exit(127);
  }
  int status = 0;
  bool ended = false;
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::minutes(2);
  while (!ended && std::chrono::steady_clock::now() < deadline &&
         lines_of(path("out/frames.jsonl")).size() < 10) {
    ended = ::waitpid(pid, &status, WNOHANG) == pid;
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  ASSERT_FALSE(ended) << "the run ended before the signal";
  ::kill(pid, SIGTERM);
  ::waitpid(pid, &status, 0);
  EXPECT_EQ(WIFEXITED(status) ? WEXITSTATUS(status) : -1, 130);
  const size_t done = lines_of(path("out/frames.jsonl")).size();
  ASSERT_GE(done, 10u);
  ASSERT_LT(done, 400u);
  const SnapshotInfo info = read_snapshot_info(path("s.lbs"));
  EXPECT_EQ(info.frames, static_cast<int64_t>(done));
  EXPECT_EQ(info.trajectory, static_cast<int64_t>(done));
  EXPECT_FALSE(fs::exists(path("s.lbs.partial")));
}

}  // namespace
}  // namespace lingbot
