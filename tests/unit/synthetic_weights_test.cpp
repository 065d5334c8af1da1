// Synthetic weights v1 against the digests the reference generator recorded for every key.
#include <gtest/gtest.h>

#include <algorithm>
#include <fstream>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "sha256.h"
#include "test_util.h"
#include "weights/synthetic.h"

namespace lingbot {
namespace {

nlohmann::json load_json(const std::string& path) {
  std::ifstream f(path);
  EXPECT_TRUE(f.good()) << "cannot open " << path;
  return nlohmann::json::parse(f);
}

struct Digest {
  std::string name;
  Shape shape;
  double sum;
  std::string sha;
};

std::vector<Digest> load_digests(const std::string& folder, uint64_t* seed) {
  const std::string dir = test::fixtures_dir() + "/" + folder;
  *seed = load_json(dir + "/meta.json").at("seed").get<uint64_t>();
  std::vector<Digest> out;
  const nlohmann::json all = load_json(dir + "/weights_digest.json");
  for (auto& [name, d] : all.items())
    out.push_back({name, d.at("shape").get<Shape>(), d.at("sum").get<double>(),
                   d.at("sha256_f32le").get<std::string>()});
  return out;
}

double sum_of(const Tensor& t) {
  // Every value is a small integer times a power of two, so this float64 sum is exact.
  double s = 0;
  for (int64_t i = 0; i < t.numel(); ++i) s += t.f32()[i];
  return s;
}

std::string sha16(const Tensor& t) {
  test::Sha256 h;
  h.update(t.raw(), t.nbytes());  // host floats are little-endian float32 already
  return h.hex().substr(0, 16);
}

TEST(Sha256, StandardVectors) {
  test::Sha256 abc;
  abc.update("abc", 3);
  EXPECT_EQ(abc.hex(), "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad");
  test::Sha256 empty;
  EXPECT_EQ(empty.hex(), "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855");
  // Two blocks, fed in uneven pieces.
  const std::string msg = "abcdbcdecdefdefgefghfghighijhijkijkljklmklmnlmnomnopnopq";
  test::Sha256 split;
  split.update(msg.data(), 5);
  split.update(msg.data() + 5, msg.size() - 5);
  EXPECT_EQ(split.hex(), "248d6a61d20638b8e5c026930c3e6039a33ce45964ff2167f6ecedd419db06c1");
}

TEST(SyntheticWeights, TinyEveryKeySumAndSha) {
  uint64_t seed = 0;
  const std::vector<Digest> digests = load_digests("tiny", &seed);
  ASSERT_EQ(seed, 1u);
  ASSERT_GT(digests.size(), 1000u);
  for (const Digest& d : digests) {
    const Tensor t = synthetic_tensor(seed, d.name, d.shape);
    EXPECT_EQ(sum_of(t), d.sum) << d.name;
    EXPECT_EQ(sha16(t), d.sha) << d.name;
  }
}

TEST(SyntheticWeights, FullSmallKeysAndSampledLargeOnes) {
  uint64_t seed = 0;
  std::vector<Digest> digests = load_digests("full", &seed);
  ASSERT_EQ(seed, 3u);
  ASSERT_GT(digests.size(), 1300u);
  // The whole model is 1.16e9 values, too many for a unit test: check every tensor up to 2M
  // elements (93M values) and a spread of the large ones.
  constexpr int64_t kSmall = 2'000'000;
  std::vector<const Digest*> large;
  size_t checked = 0;
  for (const Digest& d : digests) {
    if (shape_numel(d.shape) > kSmall) {
      large.push_back(&d);
      continue;
    }
    const Tensor t = synthetic_tensor(seed, d.name, d.shape);
    EXPECT_EQ(sum_of(t), d.sum) << d.name;
    EXPECT_EQ(sha16(t), d.sha) << d.name;
    ++checked;
  }
  EXPECT_GT(checked, 1000u);
  ASSERT_FALSE(large.empty());
  std::sort(large.begin(), large.end(), [](const Digest* a, const Digest* b) {
    return shape_numel(a->shape) > shape_numel(b->shape);
  });
  const size_t step = std::max<size_t>(1, large.size() / 4);
  for (size_t i = 0; i < large.size(); i += step) {
    const Digest& d = *large[i];
    const Tensor t = synthetic_tensor(seed, d.name, d.shape);
    EXPECT_EQ(sum_of(t), d.sum) << d.name;
    EXPECT_EQ(sha16(t), d.sha) << d.name;
  }
}

}  // namespace
}  // namespace lingbot
