// The torch.save writer, read back by our own reader: every dtype bitwise, data aligned, CRCs
// right, and the zip64 form (forced on a small archive) read through its 64-bit records.
#include "weights/torch_pt_writer.h"

#include <gtest/gtest.h>

#include <cstring>
#include <fstream>
#include <random>
#include <string>

#include "lingbot/checkpoint.h"
#include "lingbot/error.h"
#include "test_util.h"
#include "weights/mapped_file.h"
#include "weights/torch_pt.h"
#include "weights/zip_reader.h"

namespace lingbot {
namespace {

// One tensor of every dtype, plus a scalar and an empty one, filled with random bytes (bool:
// 0 or 1, the only values torch allows).
TensorMap every_dtype() {
  std::mt19937 rng(7);
  TensorMap m;
  const DType all[] = {DType::F32, DType::F16, DType::BF16, DType::F64, DType::I64,
                       DType::I32, DType::I16, DType::I8,   DType::U8,  DType::Bool};
  int i = 0;
  for (DType d : all) {
    Tensor t = Tensor::zeros({3, 1 + i, 5}, d);
    auto* p = static_cast<uint8_t*>(t.raw());
    for (size_t k = 0; k < t.nbytes(); ++k)
      p[k] = static_cast<uint8_t>(d == DType::Bool ? rng() & 1 : rng());
    m[std::string("layer.") + dtype_name(d)] = t;
    ++i;
  }
  m["scalar"] = Tensor::zeros({}, DType::F32);
  m["scalar"].f32()[0] = 1.5f;
  m["empty"] = Tensor::zeros({0, 4}, DType::BF16);
  return m;
}

void expect_same(const TensorMap& got, const TensorMap& want) {
  ASSERT_EQ(got.size(), want.size());
  for (auto& [name, w] : want) {
    SCOPED_TRACE(name);
    ASSERT_TRUE(got.count(name));
    const Tensor& g = got.at(name);
    EXPECT_EQ(g.dtype(), w.dtype());
    EXPECT_EQ(g.shape(), w.shape());
    ASSERT_EQ(g.nbytes(), w.nbytes());
    if (w.nbytes()) {
      EXPECT_EQ(std::memcmp(g.raw(), w.raw(), w.nbytes()), 0);
      // Aligned like torch's own files, so the reader views the mapping instead of copying.
      EXPECT_EQ(reinterpret_cast<uintptr_t>(g.raw()) % 64, 0u);
    }
  }
}

uint32_t le32(const std::string& b, size_t at) {
  uint32_t v = 0;
  for (int k = 3; k >= 0; --k) v = v << 8 | static_cast<uint8_t>(b[at + k]);
  return v;
}

std::string read_all(const std::string& path) {
  std::ifstream f(path, std::ios::binary);
  return {std::istreambuf_iterator<char>(f), std::istreambuf_iterator<char>()};
}

class TorchPtWriter : public test::TempDirTest {};

TEST_F(TorchPtWriter, RoundTripsEveryDtypeBitwise) {
  const TensorMap want = every_dtype();
  const std::string p = path("w.pt");
  write_torch_checkpoint(p, want);
  expect_same(read_torch_checkpoint(p), want);
  // Every record's CRC-32 checks out and the archive is the plain (32-bit) zip form.
  const MappedFile f = map_file(p);
  const auto entries = read_zip_directory(f.data, f.size, p);
  ASSERT_EQ(entries.size(), want.size() + 3);  // data.pkl, byteorder, version
  for (const ZipEntry& e : entries) EXPECT_NO_THROW(zip_entry_bytes(e, p, true)) << e.name;
  const std::string bytes = read_all(p);
  EXPECT_EQ(bytes.find(std::string("PK\x06\x06", 4)), std::string::npos);
}

TEST_F(TorchPtWriter, Zip64FormReadsThroughItsRecords) {
  const TensorMap want = every_dtype();
  const std::string p = path("w64.pt");
  write_torch_checkpoint(p, want, /*force_zip64=*/true);
  expect_same(read_torch_checkpoint(p), want);

  const std::string b = read_all(p);
  const size_t eocd = b.rfind(std::string("PK\x05\x06", 4));
  ASSERT_NE(eocd, std::string::npos);
  // The 32-bit end record holds placeholders only, so the reader had to follow the locator to
  // the zip64 end record, and each entry's sizes and offset came from its zip64 extra field.
  EXPECT_EQ(le32(b, eocd + 8), 0xffffffffu);  // both entry counts
  EXPECT_EQ(le32(b, eocd + 12), 0xffffffffu);
  EXPECT_EQ(le32(b, eocd + 16), 0xffffffffu);
  ASSERT_EQ(le32(b, eocd - 20), 0x07064b50u);  // locator just before it
  const size_t cd = b.find(std::string("PK\x01\x02", 4));
  ASSERT_NE(cd, std::string::npos);
  EXPECT_EQ(le32(b, cd + 20), 0xffffffffu);
  EXPECT_EQ(le32(b, cd + 42), 0xffffffffu);
  const MappedFile f = map_file(p);
  for (const ZipEntry& e : read_zip_directory(f.data, f.size, p))
    EXPECT_NO_THROW(zip_entry_bytes(e, p, true)) << e.name;
}

TEST_F(TorchPtWriter, ConvertWritesPtByExtension) {
  const std::string in = path("in.pt"), out = path("out.pt");
  write_torch_checkpoint(in, every_dtype());
  const ConvertSummary s = convert_checkpoint(in, out, {.dtype = "bf16"});
  const TensorMap got = read_torch_checkpoint(out);
  EXPECT_EQ(s.tensors, got.size());
  for (auto& [name, t] : read_torch_checkpoint(in)) {
    SCOPED_TRACE(name);
    const bool floating = t.dtype() == DType::F32 || t.dtype() == DType::F16 ||
                          t.dtype() == DType::BF16 || t.dtype() == DType::F64;
    const Tensor want = floating ? t.to(DType::BF16) : t;
    const Tensor& g = got.at(name);
    EXPECT_EQ(g.dtype(), want.dtype());
    ASSERT_EQ(g.nbytes(), want.nbytes());
    if (g.nbytes()) EXPECT_EQ(std::memcmp(g.raw(), want.raw(), g.nbytes()), 0);
  }
  // The fixture torch wrote, rewritten by us, reads back the same.
  const std::string fixture = test::fixtures_dir() + "/ptcases/nested.pt";
  convert_checkpoint(fixture, out);
  expect_same(read_torch_checkpoint(out), read_torch_checkpoint(fixture));
}

TEST_F(TorchPtWriter, UnwritablePathIsAnError) {
  EXPECT_THROW(write_torch_checkpoint(path("missing/dir/x.pt"), every_dtype()), Error);
}

}  // namespace
}  // namespace lingbot
