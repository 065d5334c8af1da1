// The CUDA kernels are launched with programmatic dependent launch on Hopper: a kernel may start
// while the one before it is finishing, and is correct only because its first step is
// await_inputs(). This reads the backend's kernel sources (no GPU needed) and checks that every
// __global__ function calls it before any return, and that every launch goes through
// launch_kernel(), so a new kernel cannot silently skip either.
#include <gtest/gtest.h>

#include <cctype>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>
#include <vector>

namespace {

namespace fs = std::filesystem;

std::string read(const fs::path& p) {
  std::ifstream f(p);
  std::stringstream s;
  s << f.rdbuf();
  return s.str();
}

// The code of `src` with comments and string literals blanked out (same length), so that braces
// and words inside them are not taken for code.
std::string code_only(const std::string& src) {
  std::string out = src;
  for (size_t i = 0; i < out.size(); ++i) {
    if (out.compare(i, 2, "//") == 0) {
      while (i < out.size() && out[i] != '\n') out[i++] = ' ';
    } else if (out.compare(i, 2, "/*") == 0) {
      const size_t end = out.find("*/", i + 2);
      const size_t stop = end == std::string::npos ? out.size() : end + 2;
      for (; i < stop; ++i)
        if (out[i] != '\n') out[i] = ' ';
      --i;
    } else if (out[i] == '"' || out[i] == '\'') {
      const char q = out[i];
      for (++i; i < out.size() && out[i] != q; ++i) {
        if (out[i] == '\\') out[i++] = ' ';
        if (i < out.size() && out[i] != '\n') out[i] = ' ';
      }
    }
  }
  return out;
}

struct Kernel {
  std::string file, name, body;
};

std::vector<Kernel> kernels(const fs::path& file) {
  const std::string code = code_only(read(file));
  std::vector<Kernel> found;
  for (size_t at = code.find("__global__"); at != std::string::npos;
       at = code.find("__global__", at + 1)) {
    const size_t open = code.find('{', at);
    if (open == std::string::npos) break;
    size_t end = open, depth = 0;
    for (; end < code.size(); ++end) {
      if (code[end] == '{') ++depth;
      if (code[end] == '}' && --depth == 0) break;
    }
    // The name: the word before the parameter list, the last parenthesis before the body.
    size_t paren = code.rfind(')', open), level = 0;
    for (; paren > at; --paren) {
      if (code[paren] == ')') ++level;
      if (code[paren] == '(' && --level == 0) break;
    }
    size_t name_begin = paren;
    while (name_begin > at && (std::isalnum(static_cast<unsigned char>(code[name_begin - 1])) ||
                               code[name_begin - 1] == '_'))
      --name_begin;
    found.push_back({file.filename().string(), code.substr(name_begin, paren - name_begin),
                     code.substr(open, end - open)});
  }
  return found;
}

fs::path cuda_sources() {
  return fs::path(LINGBOT_SOURCE_DIR) / "src" / "backend" / "cuda";
}

TEST(CudaKernels, EveryKernelWaitsForItsInputsBeforeAnyReturn) {
  ASSERT_TRUE(fs::is_directory(cuda_sources())) << cuda_sources();
  int count = 0;
  for (const auto& e : fs::directory_iterator(cuda_sources())) {
    const std::string ext = e.path().extension().string();
    if (ext != ".cu" && ext != ".cuh") continue;
    for (const Kernel& k : kernels(e.path())) {
      ++count;
      SCOPED_TRACE(k.file + ": " + k.name);
      const size_t wait = k.body.find("await_inputs();");
      if (wait == std::string::npos) {
        ADD_FAILURE() << "no await_inputs()";
        continue;
      }
      const size_t ret = k.body.find("return");
      EXPECT_TRUE(ret == std::string::npos || wait < ret) << "returns before await_inputs()";
    }
  }
  EXPECT_GE(count, 20);  // the backend's kernels were found at all
}

TEST(CudaKernels, EveryLaunchGoesThroughLaunchKernel) {
  for (const auto& e : fs::directory_iterator(cuda_sources())) {
    const std::string code = code_only(read(e.path()));
    EXPECT_EQ(code.find("<<<"), std::string::npos) << e.path().filename() << " launches directly";
  }
}

}  // namespace
