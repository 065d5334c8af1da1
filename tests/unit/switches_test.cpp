// The backend switch table (backend/switches.h): each variable sets its field, an unset or empty
// variable leaves the default, and the table's stated defaults are the struct's.
#include "backend/switches.h"

#include <gtest/gtest.h>

#include <cstdlib>
#include <cstring>
#include <set>
#include <string>
#include <utility>
#include <vector>

namespace lingbot {
namespace {

// Unsets every switch for the test and restores the environment afterwards.
class Switches : public ::testing::Test {
 protected:
  void SetUp() override {
    for (const SwitchInfo& info : switch_table()) {
      if (const char* v = std::getenv(info.name)) saved_.emplace_back(info.name, v);
      unsetenv(info.name);
    }
  }
  void TearDown() override {
    for (const SwitchInfo& info : switch_table()) unsetenv(info.name);
    for (const auto& [name, value] : saved_) setenv(name.c_str(), value.c_str(), 1);
  }
  std::vector<std::pair<std::string, std::string>> saved_;
};

TEST_F(Switches, UnsetMeansTheDefaults) {
  EXPECT_EQ(read_switches(), BackendSwitches{});
  for (const SwitchInfo& info : switch_table()) setenv(info.name, "", 1);
  EXPECT_EQ(read_switches(), BackendSwitches{});
}

TEST_F(Switches, TableDefaultsAreTheStructs) {
  std::set<std::string> names;
  for (const SwitchInfo& info : switch_table()) {
    SCOPED_TRACE(info.name);
    EXPECT_EQ(std::string(info.name).rfind("LINGBOT_", 0), 0u);
    EXPECT_TRUE(names.insert(info.name).second) << "listed twice";
    EXPECT_GT(std::strlen(info.meaning), 10u);
    BackendSwitches s;
    if (*info.default_value) info.apply(s, info.default_value);
    EXPECT_EQ(s, BackendSwitches{});
  }
}

TEST_F(Switches, EachVariableSetsItsField) {
  setenv("LINGBOT_CUDA_GRAPH", "0", 1);
  setenv("LINGBOT_PDL", "0", 1);
  setenv("LINGBOT_GEMM_TUNE", "0", 1);
  setenv("LINGBOT_CUDA_VERBOSE", "2", 1);
  setenv("LINGBOT_ATTN_IMPL", "mma", 1);
  setenv("LINGBOT_ATTN_SPLITS", "7", 1);
  setenv("LINGBOT_ATTN_MODE", "84", 1);
  setenv("LINGBOT_CONV_WGMMA", "0", 1);
  setenv("LINGBOT_CONV_BN", "64", 1);
  setenv("LINGBOT_CONV_SPLITS", "3", 1);
  const BackendSwitches s = read_switches();
  EXPECT_FALSE(s.cuda_graph);
  EXPECT_FALSE(s.pdl);
  EXPECT_FALSE(s.gemm_tune);
  EXPECT_EQ(s.cuda_verbose, 2);
  EXPECT_EQ(s.attn_impl, "mma");
  EXPECT_EQ(s.attn_splits, 7);
  EXPECT_EQ(s.attn_mode, 84);
  EXPECT_FALSE(s.conv_wgmma);
  EXPECT_EQ(s.conv_bn, 64);
  EXPECT_EQ(s.conv_splits, 3);
}

// A switch that is on by default stays on for any value but "0"; a verbose level that is not a
// number means 1.
TEST_F(Switches, OnlyZeroTurnsASwitchOff) {
  setenv("LINGBOT_CUDA_GRAPH", "1", 1);
  setenv("LINGBOT_PDL", "no", 1);
  setenv("LINGBOT_CUDA_VERBOSE", "yes", 1);
  const BackendSwitches s = read_switches();
  EXPECT_TRUE(s.cuda_graph);
  EXPECT_TRUE(s.pdl);
  EXPECT_EQ(s.cuda_verbose, 1);
}

}  // namespace
}  // namespace lingbot
