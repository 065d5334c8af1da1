// `lingbot-map view` and `run --view` from the outside: bad input ends in one line, and a
// browser that stops reading does not slow the run or grow its memory.
#ifdef LINGBOT_HAVE_VIEWER
#include <arpa/inet.h>
#include <gtest/gtest.h>
#include <netinet/in.h>
#include <signal.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <regex>
#include <sstream>
#include <string>
#include <thread>

#include "test_util.h"

namespace lingbot {
namespace {

namespace fs = std::filesystem;

std::string frames() {
  return test::fixtures_dir() + "/tiny/frames";
}
const std::string kRun =
    " run --model synthetic:1 --arch tiny --preprocess none --scale-frames 4 "
    "--window 6 --quiet --input ";

// A listening socket on 127.0.0.1 (any port): that port is then in use.
struct Listener {
  int fd = ::socket(AF_INET, SOCK_STREAM, 0);
  int port = 0;
  Listener() {
    sockaddr_in a{};
    a.sin_family = AF_INET;
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    socklen_t n = sizeof a;
    EXPECT_EQ(::bind(fd, reinterpret_cast<sockaddr*>(&a), n), 0);
    EXPECT_EQ(::listen(fd, 1), 0);
    ::getsockname(fd, reinterpret_cast<sockaddr*>(&a), &n);
    port = ntohs(a.sin_port);
  }
  ~Listener() { ::close(fd); }
};

class ViewerCli : public test::TempDirTest {};

TEST_F(ViewerCli, MissingOrIncompleteResultFolderIsOneLine) {
  test::expect_clean_cli_failure("view " + path("nothing") + " --port 0", "nothing");
  fs::create_directories(path("broken"));
  std::ofstream(path("broken/predictions.safetensors")) << "\x10\0\0\0";
  test::expect_clean_cli_failure("view " + path("broken") + " --port 0", "broken");
}

TEST_F(ViewerCli, PortInUseOrBadHostIsOneLineBeforeTheModelLoads) {
  if (!fs::is_directory(frames())) GTEST_SKIP() << "no fixtures at " << frames();
  Listener taken;
  // The reason is the system's, not "Success" (closing the socket used to overwrite it).
  test::expect_clean_cli_failure(
      kRun + frames() + " --out " + path("out") + " --view --port " + std::to_string(taken.port),
      "cannot listen on 127.0.0.1:" + std::to_string(taken.port) + ": Address already in use");
  test::expect_clean_cli_failure(
      kRun + frames() + " --out " + path("out") + " --view --port 0 --view-host nowhere",
      "--view-host");
}

// `run --view` in the background, its output in a file.
struct ViewedRun {
  pid_t pid = -1;
  std::string log;
  ViewedRun(const std::string& args, const std::string& log_path) : log(log_path) {
    pid = ::fork();
    if (pid == 0) {
      const std::string cmd = "exec " + std::string(LINGBOT_CLI) + args + " >" + log + " 2>&1";
      ::execl("/bin/sh", "sh", "-c", cmd.c_str(), static_cast<char*>(nullptr));
      ::_exit(127);
    }
  }
  std::string output() const {
    std::ifstream f(log);
    std::stringstream s;
    s << f.rdbuf();
    return s.str();
  }
  // Waits (up to 120 s) for `pattern` in the output; returns its first group.
  std::string wait_for(const std::string& pattern) const {
    const std::regex re(pattern);
    for (int i = 0; i < 1200; ++i) {
      std::smatch m;
      const std::string out = output();
      if (std::regex_search(out, m, re)) return m.size() > 1 ? m[1].str() : m[0].str();
      std::this_thread::sleep_for(std::chrono::milliseconds(100));
    }
    ADD_FAILURE() << "no '" << pattern << "' in: " << output();
    return "";
  }
  int64_t peak_rss_kb() const {  // VmHWM
    std::ifstream f("/proc/" + std::to_string(pid) + "/status");
    std::string line;
    while (std::getline(f, line))
      if (line.rfind("VmHWM:", 0) == 0) return std::stoll(line.substr(6));
    return -1;
  }
  double cpu_seconds = 0;  // user + system, after stop()
  int stop() {
    ::kill(pid, SIGINT);
    int status = 0;
    rusage use{};
    ::wait4(pid, &status, 0, &use);
    cpu_seconds = use.ru_utime.tv_sec + use.ru_stime.tv_sec +
                  1e-6 * (use.ru_utime.tv_usec + use.ru_stime.tv_usec);
    return WIFEXITED(status) ? WEXITSTATUS(status) : -1;
  }
};

// Asks for the WebSocket with a 4 KB receive buffer and never reads.
int stalled_client(int port) {
  const int fd = ::socket(AF_INET, SOCK_STREAM, 0);
  const int small = 4096;
  ::setsockopt(fd, SOL_SOCKET, SO_RCVBUF, &small, sizeof small);
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_port = htons(static_cast<uint16_t>(port));
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  EXPECT_EQ(::connect(fd, reinterpret_cast<sockaddr*>(&a), sizeof a), 0);
  const std::string req =
      "GET /ws HTTP/1.1\r\nHost: 127.0.0.1\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n"
      "Sec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==\r\nSec-WebSocket-Version: 13\r\n\r\n";
  EXPECT_EQ(::write(fd, req.data(), req.size()), static_cast<ssize_t>(req.size()));
  return fd;
}

// The same run (64 frames, every pixel's point sent) with and without a browser that stops
// reading: frames/s from the run's --json report and the process's peak memory. Printed for
// docs/PERFORMANCE.md.
TEST_F(ViewerCli, ClientThatStopsReadingDoesNotSlowTheRun) {
  if (!fs::is_directory(frames())) GTEST_SKIP() << "no fixtures at " << frames();
  // 64 frames (the 16 four times over), ~3 MB of points and images: more than the socket
  // buffers between the server and the stalled client hold.
  fs::create_directories(path("frames"));
  std::vector<fs::path> originals;
  for (const auto& e : fs::directory_iterator(frames())) originals.push_back(e.path());
  std::sort(originals.begin(), originals.end());
  for (int i = 0; i < 64; ++i) {
    char name[16];
    std::snprintf(name, sizeof name, "%03d.png", i);
    fs::create_symlink(originals[i % originals.size()], path("frames") + "/" + name);
  }
  auto measure = [&](bool stall) {
    const std::string tag = stall ? "stalled" : "free";
    // One thread: OpenMP workers spinning on a shared machine would blur the CPU time.
    ViewedRun run(kRun + path("frames") + " --threads 1 --out " + path(tag) + " --json " +
                      path(tag + ".json") + " --point-stride 1 --view --port 0",
                  path(tag + ".log"));
    const int port = std::stoi(run.wait_for("viewer: http://127\\.0\\.0\\.1:([0-9]+)/"));
    int fd = stall ? stalled_client(port) : -1;
    run.wait_for("frames in [0-9.]+ s");
    const int64_t peak = run.peak_rss_kb();
    EXPECT_EQ(run.stop(), 0) << run.output();
    if (fd >= 0) ::close(fd);
    std::ifstream f(path(tag + ".json"));
    const auto report = nlohmann::json::parse(f);
    const double fps = report["streaming_fps"].get<double>();
    const double waited = report["wait_outputs_s"].get<double>();
    std::printf(
        "run --view, %s: %.2f frames/s, the model waited %.3f s of %.2f s for its "
        "outputs, viewer sink work %.3f s, CPU %.2f s, peak memory %.1f MB\n",
        stall ? "a client that stopped reading" : "no client", fps, waited,
        report["seconds"].get<double>(), report["outputs_s"].value("viewer", -1.0), run.cpu_seconds,
        peak / 1e3);
    // The direct measure: the model never waited for the viewer's output thread.
    EXPECT_LT(waited, 0.05 * report["seconds"].get<double>());
    return std::make_tuple(fps, run.cpu_seconds, peak);
  };
  const auto [fps_free, cpu_free, peak_free] = measure(false);
  const auto [fps_stalled, cpu_stalled, peak_stalled] = measure(true);
  // Wall-clock frames/s moves by 2x from run to run on a shared machine whatever the viewer
  // does, so the comparison that holds is the work done: a server that spun or buffered for the
  // stalled browser would show here. frames/s itself only catches a hang.
  EXPECT_LT(cpu_stalled, 1.3 * cpu_free + 0.5);
  EXPECT_GT(fps_stalled, 0.1 * fps_free);
  EXPECT_LT(peak_stalled - peak_free, 32 * 1024);  // KB
}

}  // namespace
}  // namespace lingbot
#endif  // LINGBOT_HAVE_VIEWER
