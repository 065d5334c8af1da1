// Op calls with bad operands, each with the one-line error every backend must give for it. The
// CPU test and the GPU test run the same list, so both backends are held to the same checks.
#pragma once

#include <functional>
#include <string>
#include <vector>

#include "backend/ops.h"

namespace lingbot::test {

struct BadCall {
  std::string error;  // the exact message
  std::function<void(Backend&)> call;
};

inline std::vector<BadCall> bad_calls() {
  auto t = [](Backend& b, Shape s) { return b.alloc(s, DType::F32); };
  std::vector<BadCall> calls;
  calls.push_back({"linear: input [4, 8], weight [5, 9], output [4, 5]", [t](Backend& b) {
                     Tensor x = t(b, {4, 8}), w = t(b, {5, 9}), y = t(b, {4, 5});
                     b.linear(x, w, nullptr, y);
                   }});
  calls.push_back({"linear: weight [5, 8], bias [4]", [t](Backend& b) {
                     Tensor x = t(b, {4, 8}), w = t(b, {5, 8}), bias = t(b, {4}), y = t(b, {4, 5});
                     b.linear(x, w, &bias, y);
                   }});
  calls.push_back({"layer_norm: input [4, 8], weight [7]", [t](Backend& b) {
                     Tensor x = t(b, {4, 8}), w = t(b, {7}), y = t(b, {4, 8});
                     b.layer_norm(x, &w, nullptr, 1e-5f, y);
                   }});
  calls.push_back({"layer_norm_linear: input [4, 8], weight [7]", [t](Backend& b) {
                     Tensor x = t(b, {4, 8}), g = t(b, {7}), h = t(b, {4, 8}), w = t(b, {5, 8}),
                            y = t(b, {4, 5});
                     b.layer_norm_linear(x, &g, nullptr, 1e-5f, h, w, nullptr, y);
                   }});
  calls.push_back(
      {"layer_norm_linear: input [4, 8], weight [5, 9], output [4, 5]", [t](Backend& b) {
         Tensor x = t(b, {4, 8}), h = t(b, {4, 8}), w = t(b, {5, 9}), y = t(b, {4, 5});
         b.layer_norm_linear(x, nullptr, nullptr, 1e-5f, h, w, nullptr, y);
       }});
  calls.push_back({"copy_ranges: a range without memory", [t](Backend& b) {
                     Tensor y = t(b, {4});
                     b.copy_ranges({{nullptr, y.raw(), 4}});
                   }});
  calls.push_back({"add: cannot broadcast [3] onto [4, 8]", [t](Backend& b) {
                     Tensor x = t(b, {4, 8}), y = t(b, {3});
                     b.add(x, y);
                   }});
  calls.push_back({"concat_last: a [4, 3], b [5, 2], output [4, 5]", [t](Backend& b) {
                     Tensor a = t(b, {4, 3}), c = t(b, {5, 2}), y = t(b, {4, 5});
                     b.concat_last(a, c, y);
                   }});
  calls.push_back(
      {"split_qkv: qkv [2, 20], q [2, 1, 8]", [t](Backend& b) {
         Tensor qkv = t(b, {2, 20}), q = t(b, {2, 1, 8}), k = t(b, {2, 1, 8}), v = t(b, {2, 1, 8});
         b.split_qkv(qkv, nullptr, nullptr, q, k, v);
       }});
  calls.push_back({"attention over an empty key set", [t](Backend& b) {
                     Tensor q = t(b, {2, 1, 64}), o = t(b, {2, 1, 64});
                     b.attention(q, {}, 0.125f, o);
                   }});
  calls.push_back(
      {"conv2d: input [1, 3, 8, 8], weight [4, 3, 3, 3], output [1, 4, 8, 8]", [t](Backend& b) {
         Tensor x = t(b, {1, 3, 8, 8}), w = t(b, {4, 3, 3, 3}), y = t(b, {1, 4, 8, 8});
         b.conv2d(x, w, nullptr, 1, 0, y);
       }});
  calls.push_back({"conv2d: the epilogue is ReLU or accumulate, not both", [t](Backend& b) {
                     Tensor x = t(b, {1, 3, 8, 8}), w = t(b, {4, 3, 3, 3}), y = t(b, {1, 4, 6, 6});
                     b.conv2d(x, w, nullptr, 1, 0, y, Act::ReLU, true);
                   }});
  calls.push_back({"upsample_bilinear: input [1, 3, 4, 4], output [1, 2, 8, 8]", [t](Backend& b) {
                     Tensor x = t(b, {1, 3, 4, 4}), y = t(b, {1, 2, 8, 8});
                     b.upsample_bilinear(x, y);
                   }});
  calls.push_back(
      {"upsample_bilinear: cannot broadcast [1, 2, 8, 7] onto [1, 2, 8, 8]", [t](Backend& b) {
         Tensor x = t(b, {1, 2, 4, 4}), y = t(b, {1, 2, 8, 8}), add = t(b, {1, 2, 8, 7});
         b.upsample_bilinear(x, y, &add);
       }});
  calls.push_back(
      {"upsample_conv2d: input [1, 3, 4, 4] upsampled to [1, 3, 8, 8], weight [4, "
       "3, 3, 3], output [1, 4, 8, 8]",
       [t](Backend& b) {
         Tensor x = t(b, {1, 3, 4, 4}), w = t(b, {4, 3, 3, 3}), y = t(b, {1, 4, 8, 8});
         b.upsample_conv2d(x, nullptr, 8, 8, w, nullptr, 1, 0, y);
       }});
  calls.push_back(
      {"upsample_conv2d: cannot broadcast [1, 3, 8, 7] onto [1, 3, 8, 8]", [t](Backend& b) {
         Tensor x = t(b, {1, 3, 4, 4}), w = t(b, {4, 3, 3, 3}), y = t(b, {1, 4, 8, 8});
         Tensor add = t(b, {1, 3, 8, 7});
         b.upsample_conv2d(x, &add, 8, 8, w, nullptr, 1, 1, y);
       }});
  calls.push_back({"conv2d: input must be F32, got I32", [t](Backend& b) {
                     Tensor x = b.alloc({1, 3, 8, 8}, DType::I32), w = t(b, {4, 3, 3, 3});
                     Tensor y = t(b, {1, 4, 6, 6});
                     b.conv2d(x, w, nullptr, 1, 0, y);
                   }});
  return calls;
}

}  // namespace lingbot::test
