// The operand checks Backend runs before any backend's op: one line naming the op and shapes.
#include <gtest/gtest.h>

#include "backend/ops.h"
#include "backend_bad_calls.h"
#include "lingbot/error.h"

namespace lingbot {
namespace {

TEST(BackendChecks, BadOperandsGiveOneLineNamingTheOp) {
  auto cpu = make_cpu_backend(1);
  for (const test::BadCall& c : test::bad_calls()) {
    SCOPED_TRACE(c.error);
    try {
      c.call(*cpu);
      ADD_FAILURE() << "no error";
    } catch (const Error& e) {
      EXPECT_EQ(std::string(e.what()), c.error);
    }
  }
}

TEST(BackendChecks, RefusesTensorsOfAnotherDeviceOrDtype) {
  auto cpu = make_cpu_backend(1);
  Tensor x = Tensor::zeros({4, 8}), w = Tensor::zeros({5, 8}), y = Tensor::zeros({4, 5});
  Tensor bf = Tensor::zeros({4, 8}, DType::BF16);
  try {
    cpu->linear(bf, w, nullptr, y);
    ADD_FAILURE() << "no error";
  } catch (const Error& e) {
    EXPECT_EQ(std::string(e.what()),
              "linear: input is BF16, which this backend does not compute in");
  }
  Tensor gpu_side = Tensor::wrap(x.raw(), x.shape(), DType::F32, nullptr, Device::CUDA);
  try {
    cpu->linear(gpu_side, w, nullptr, y);
    ADD_FAILURE() << "no error";
  } catch (const Error& e) {
    EXPECT_EQ(std::string(e.what()), "linear: input must be a host tensor");
  }
  // The checked call still runs: a good one goes through.
  EXPECT_NO_THROW(cpu->linear(x, w, nullptr, y));
}

}  // namespace
}  // namespace lingbot
