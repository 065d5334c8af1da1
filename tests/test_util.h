// Shared helpers for tests: where the reference fixtures are, and how close is close enough.
#pragma once

#include <gtest/gtest.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <array>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <functional>
#include <span>
#include <string>
#include <vector>

#include "lingbot/error.h"
#include "lingbot/tensor.h"

namespace lingbot::test {

// The message of the lingbot::Error that f throws; "(no error)" when it throws none.
inline std::string error_of(const std::function<void()>& f) {
  try {
    f();
  } catch (const Error& e) {
    return e.what();
  }
  return "(no error)";
}

// The lines of a text file (none when it cannot be read).
inline std::vector<std::string> lines_of(const std::string& path) {
  std::ifstream f(path);
  std::vector<std::string> out;
  for (std::string line; std::getline(f, line);) out.push_back(line);
  return out;
}

inline std::string fixtures_dir() {
  const char* env = std::getenv("LINGBOT_FIXTURES");
  return env && *env ? env : LINGBOT_DEFAULT_FIXTURES;
}

// The fixtures README's measure: largest absolute error over largest absolute reference value.
struct Agreement {
  double max_abs_err = 0, max_abs_ref = 0;
  double relative() const { return max_abs_ref > 0 ? max_abs_err / max_abs_ref : max_abs_err; }
};

inline Agreement compare(std::span<const float> got, std::span<const float> want) {
  Agreement a;
  EXPECT_EQ(got.size(), want.size());
  const size_t n = std::min(got.size(), want.size());
  for (size_t i = 0; i < n; ++i) {
    const double gv = got[i], wv = want[i];
    const double err =
        std::isfinite(gv) && std::isfinite(wv) ? std::fabs(gv - wv) : (gv == wv ? 0.0 : INFINITY);
    a.max_abs_err = std::max(a.max_abs_err, err);
    a.max_abs_ref = std::max(a.max_abs_ref, std::fabs(wv));
  }
  return a;
}

inline Agreement compare(const Tensor& got, const Tensor& want) {
  Tensor g = got.to(DType::F32), w = want.to(DType::F32);
  EXPECT_EQ(g.numel(), w.numel()) << shape_str(got.shape()) << " vs " << shape_str(want.shape());
  const auto n = static_cast<size_t>(std::min(g.numel(), w.numel()));
  return compare(std::span<const float>(g.f32(), n), std::span<const float>(w.f32(), n));
}

// A fresh folder per test (named after the test), removed afterwards.
class TempDirTest : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = std::filesystem::temp_directory_path() /
           ("lingbot_" + std::to_string(::getpid()) + "_" +
            ::testing::UnitTest::GetInstance()->current_test_info()->test_suite_name() + "_" +
            ::testing::UnitTest::GetInstance()->current_test_info()->name());
    std::filesystem::remove_all(dir_);
    std::filesystem::create_directories(dir_);
  }
  void TearDown() override { std::filesystem::remove_all(dir_); }
  std::string path(const std::string& name) const { return (dir_ / name).string(); }
  std::filesystem::path dir_;
};

// Runs the lingbot-map program (LINGBOT_CLI) with `args`; stdout and stderr together.
struct CliResult {
  int code;
  std::string output;
};

inline CliResult run_cli(const std::string& args) {
  const std::string cmd = std::string(LINGBOT_CLI) + " " + args + " 2>&1";
  std::string out;
  FILE* p = popen(cmd.c_str(), "r");
  if (!p) return {-1, "popen failed"};
  std::array<char, 4096> buf{};
  while (size_t n = fread(buf.data(), 1, buf.size(), p)) out.append(buf.data(), n);
  const int status = pclose(p);
  return {WIFEXITED(status) ? WEXITSTATUS(status) : -1, out};
}

// A bad input ends with one line, "lingbot-map: error: ..." containing `needle`, as the last
// line, and exit code 1. Lines before it are what the run said before it failed (its estimate,
// the model's loading, a warning), never a second error, a trace or a tensor's dump.
inline void expect_clean_cli_failure(const std::string& args, const std::string& needle) {
  const CliResult r = run_cli(args);
  EXPECT_EQ(r.code, 1) << r.output;
  std::vector<std::string> lines;
  size_t start = 0;
  for (size_t end; (end = r.output.find('\n', start)) != std::string::npos; start = end + 1)
    lines.push_back(r.output.substr(start, end - start));
  EXPECT_EQ(start, r.output.size()) << "the output does not end with a line: " << r.output;
  ASSERT_FALSE(lines.empty()) << r.output;
  EXPECT_EQ(lines.back().rfind("lingbot-map: error: ", 0), 0u) << r.output;
  EXPECT_NE(lines.back().find(needle), std::string::npos) << r.output;
  for (size_t i = 0; i + 1 < lines.size(); ++i) {
    EXPECT_EQ(lines[i].find("error"), std::string::npos) << "a second error: " << r.output;
    EXPECT_EQ(lines[i].find("terminate"), std::string::npos) << r.output;
  }
}

}  // namespace lingbot::test
