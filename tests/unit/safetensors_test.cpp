// safetensors: what the writer produces reads back bit for bit, and damaged files are refused.
#include "weights/safetensors.h"

#include <gtest/gtest.h>
#include <unistd.h>

#include <cstring>
#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include "lingbot/error.h"

namespace lingbot {
namespace {

namespace fs = std::filesystem;

class Safetensors : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = fs::temp_directory_path() /
           ("lingbot_st_" + std::to_string(::getpid()) + "_" +
            ::testing::UnitTest::GetInstance()->current_test_info()->name());
    fs::create_directories(dir_);
  }
  void TearDown() override { fs::remove_all(dir_); }
  std::string path(const std::string& name) const { return (dir_ / name).string(); }

  fs::path dir_;
};

Tensor filled(Shape shape, DType dtype, int salt) {
  Tensor t = Tensor::zeros(std::move(shape), dtype);
  auto* p = static_cast<uint8_t*>(t.raw());
  for (size_t i = 0; i < t.nbytes(); ++i) p[i] = static_cast<uint8_t>(i * 37 + salt);
  if (dtype == DType::Bool)
    for (size_t i = 0; i < t.nbytes(); ++i) p[i] &= 1;
  return t;
}

std::string read_all(const std::string& path) {
  std::ifstream f(path, std::ios::binary);
  return {std::istreambuf_iterator<char>(f), std::istreambuf_iterator<char>()};
}

void write_all(const std::string& path, const std::string& bytes) {
  std::ofstream(path, std::ios::binary)
      .write(bytes.data(), static_cast<std::streamsize>(bytes.size()));
}

// A file with this JSON header and `body` bytes of tensor data.
std::string craft(const std::string& header, const std::string& body = std::string(64, '\0')) {
  std::string out(8, '\0');
  for (int i = 0; i < 8; ++i)
    out[i] = static_cast<char>(static_cast<uint64_t>(header.size()) >> (8 * i));
  return out + header + body;
}

SafetensorsFile parse(const std::string& bytes) {
  return parse_safetensors(reinterpret_cast<const uint8_t*>(bytes.data()), bytes.size(), nullptr,
                           "test.safetensors");
}

TEST_F(Safetensors, RoundTripsEveryDtype) {
  TensorMap in;
  const DType all[] = {DType::F32, DType::F16, DType::BF16, DType::F64, DType::I64,
                       DType::I32, DType::I16, DType::I8,   DType::U8,  DType::Bool};
  int salt = 0;
  for (DType d : all) in[std::string("t.") + dtype_name(d)] = filled({3, 5}, d, ++salt);
  in["scalar"] = filled({}, DType::F32, 7);
  in["empty"] = filled({0, 3}, DType::BF16, 0);
  in["odd"] = filled({7}, DType::U8, 3);  // leaves later tensors at odd offsets
  in["z.after_odd"] = filled({2, 2}, DType::F64, 9);
  write_safetensors(path("a.safetensors"), in, {{"format", "pt"}});

  SafetensorsFile out = read_safetensors(path("a.safetensors"));
  EXPECT_EQ(out.metadata.at("format"), "pt");
  ASSERT_EQ(out.tensors.size(), in.size());
  for (auto& [name, t] : in) {
    SCOPED_TRACE(name);
    ASSERT_TRUE(out.tensors.count(name));
    const Tensor& r = out.tensors.at(name);
    EXPECT_EQ(r.dtype(), t.dtype());
    EXPECT_EQ(r.shape(), t.shape());
    ASSERT_EQ(r.nbytes(), t.nbytes());
    if (t.nbytes()) {
      EXPECT_EQ(std::memcmp(r.raw(), t.raw(), t.nbytes()), 0);
      EXPECT_EQ(reinterpret_cast<uintptr_t>(r.raw()) % dtype_size(r.dtype()), 0u);
    }
  }
  EXPECT_FALSE(fs::exists(path("a.safetensors.partial")));
}

TEST_F(Safetensors, EveryTruncationIsAnError) {
  TensorMap in;
  in["a"] = filled({4, 4}, DType::F32, 1);
  in["b"] = filled({3}, DType::I64, 2);
  write_safetensors(path("full.safetensors"), in);
  const std::string bytes = read_all(path("full.safetensors"));
  for (size_t n = 0; n < bytes.size(); ++n) {
    EXPECT_THROW(parse(bytes.substr(0, n)), Error) << n;
  }
  write_all(path("cut.safetensors"), bytes.substr(0, bytes.size() - 1));
  EXPECT_THROW(read_safetensors(path("cut.safetensors")), Error);
  write_all(path("empty.safetensors"), "");
  EXPECT_THROW(read_safetensors(path("empty.safetensors")), Error);
}

TEST_F(Safetensors, RejectsMalformedHeaders) {
  auto rejects = [](const std::string& bytes, const std::string& why) {
    try {
      parse(bytes);
      ADD_FAILURE() << "accepted: " << why;
    } catch (const Error& e) {
      EXPECT_NE(std::string(e.what()).find("test.safetensors"), std::string::npos) << e.what();
    }
  };
  std::string huge_len = craft("{}");
  huge_len[4] = '\x01';  // header length 2^32 + 2, far beyond the file
  rejects(huge_len, "header length beyond the file");
  std::string all_ones(8, '\xff');
  rejects(all_ones + "{}", "header length 2^64-1");
  rejects(craft(R"({"a":{"dtype":"F32","shape":[2],"data_offsets":[0,8]})", ""),
          "offsets beyond the data");
  rejects(craft(R"({"a":{"dtype":"F32","shape":[2],"data_offsets":[60,68]}})"),
          "offsets outside the data");
  rejects(craft(R"({"a":{"dtype":"F32","shape":[2],"data_offsets":[8,0]}})"), "reversed offsets");
  rejects(craft(R"({"a":{"dtype":"F32","shape":[3],"data_offsets":[0,8]}})"),
          "size does not match shape");
  rejects(craft(R"({"a":{"dtype":"F8_E4M3","shape":[2],"data_offsets":[0,2]}})"), "unknown dtype");
  rejects(craft(R"({"a":{"dtype":"F32","shape":[-2],"data_offsets":[0,8]}})"), "negative dim");
  rejects(
      craft(R"({"a":{"dtype":"F32","shape":[1099511627776,1099511627776],"data_offsets":[0,8]}})"),
      "overflowing shape");
  rejects(craft(R"({"a":{"dtype":"F32","shape":[2]}})"), "no offsets");
  rejects(craft(R"({"a":[1,2]})"), "entry not an object");
  rejects(craft(R"({"__metadata__":{"k":1}})"), "metadata value not a string");
  rejects(craft(R"([1,2,3])"), "header is an array");
  rejects(craft(R"("text")"), "header is a string");
  rejects(craft(R"({"a":)"), "truncated JSON");
  rejects(craft(std::string("{\"\xff\":1}")), "invalid UTF-8");
}

TEST_F(Safetensors, AcceptsCraftedMinimalFile) {
  SafetensorsFile f = parse(craft(R"({"s":{"dtype":"F32","shape":[],"data_offsets":[4,8]}})"));
  ASSERT_TRUE(f.tensors.count("s"));
  EXPECT_EQ(f.tensors.at("s").numel(), 1);
}

}  // namespace
}  // namespace lingbot
