// The torch.save reader against the ptcases fixtures, hand-built archives and damaged copies.
#include "weights/torch_pt.h"

#include <gtest/gtest.h>
#include <unistd.h>

#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include "lingbot/error.h"
#include "test_util.h"
#include "weights/checkpoint.h"
#include "weights/safetensors.h"
#include "weights/unpickler.h"
#include "weights/zip_reader.h"

namespace lingbot {
namespace {

namespace fs = std::filesystem;

std::string ptcase(const std::string& name) {
  return test::fixtures_dir() + "/ptcases/" + name;
}

std::string read_all(const std::string& path) {
  std::ifstream f(path, std::ios::binary);
  EXPECT_TRUE(f.good()) << "cannot open " << path;
  return {std::istreambuf_iterator<char>(f), std::istreambuf_iterator<char>()};
}

TensorMap parse(const std::string& bytes) {
  // A private copy, so views stay valid for the returned map's lifetime.
  auto buf = std::make_shared<std::string>(bytes);
  return parse_torch_checkpoint(reinterpret_cast<const uint8_t*>(buf->data()), buf->size(), buf,
                                "test.pt");
}

using test::error_of;

// The fixture stores bools as uint8; everything else must keep its dtype.
void expect_matches_expected(const TensorMap& got) {
  const SafetensorsFile want = read_safetensors(ptcase("expected.safetensors"));
  ASSERT_EQ(got.size(), want.tensors.size());
  for (auto& [name, w] : want.tensors) {
    SCOPED_TRACE(name);
    ASSERT_TRUE(got.count(name));
    const Tensor& g = got.at(name);
    EXPECT_EQ(g.dtype() == DType::Bool ? DType::U8 : g.dtype(), w.dtype());
    EXPECT_EQ(g.shape(), w.shape());
    ASSERT_EQ(g.nbytes(), w.nbytes());
    if (w.nbytes()) EXPECT_EQ(std::memcmp(g.raw(), w.raw(), w.nbytes()), 0);
  }
}

TEST(TorchPt, FlatMatchesExpected) {
  expect_matches_expected(read_torch_checkpoint(ptcase("flat.pt")));
}

TEST(TorchPt, NestedUnwrapsModel) {
  const TensorMap m = read_torch_checkpoint(ptcase("nested.pt"));
  expect_matches_expected(m);
  EXPECT_FALSE(m.count("epoch"));
}

TEST(TorchPt, LegacyFormatMatchesExpected) {
  expect_matches_expected(read_torch_checkpoint(ptcase("legacy.pt")));
}

TEST(TorchPt, KeepsDtypes) {
  const TensorMap m = read_torch_checkpoint(ptcase("flat.pt"));
  EXPECT_EQ(m.at("c.flag").dtype(), DType::Bool);
  EXPECT_EQ(m.at("a.bias").dtype(), DType::BF16);
  EXPECT_EQ(m.at("b.half").dtype(), DType::F16);
  EXPECT_EQ(m.at("c.index").dtype(), DType::I64);
  EXPECT_EQ(m.at("f.scalar").rank(), 0);
  EXPECT_EQ(m.at("f.empty").shape(), (Shape{0, 4}));
}

TEST(Checkpoint, DispatchesOnContent) {
  for (const char* name : {"flat.pt", "nested.pt", "legacy.pt"}) {
    SCOPED_TRACE(name);
    expect_matches_expected(load_checkpoint(ptcase(name)));
  }
  const TensorMap st = load_checkpoint(ptcase("expected.safetensors"));
  EXPECT_EQ(st.size(), 14u);
}

TEST(Checkpoint, MissingFileNamesPath) {
  EXPECT_EQ(error_of([] { load_checkpoint("/nonexistent/dir/model.pt"); }),
            "cannot open /nonexistent/dir/model.pt: No such file or directory");
}

// ---- hand-built pickles and archives ---------------------------------------------------------

// Pickle protocol 2 assembled opcode by opcode.
struct Pickle {
  std::string b = "\x80\x02";
  Pickle& op(char c) {
    b += c;
    return *this;
  }
  Pickle& str(const std::string& s) {
    b += 'X';
    for (int i = 0; i < 4; ++i) b += static_cast<char>(s.size() >> (8 * i));
    b += s;
    return *this;
  }
  Pickle& i(uint8_t v) {
    b += 'K';
    b += static_cast<char>(v);
    return *this;
  }
  Pickle& global(const std::string& module, const std::string& name) {
    b += 'c' + module + '\n' + name + '\n';
    return *this;
  }
  Pickle& tuple(const std::vector<uint8_t>& v) {
    op('(');
    for (uint8_t x : v) i(x);
    return op('t');
  }
  // _rebuild_tensor_v2(storage(key, numel), offset, size, stride, False, OrderedDict())
  Pickle& tensor(const std::string& key, const char* type, uint8_t numel, uint8_t offset,
                 const std::vector<uint8_t>& size, const std::vector<uint8_t>& stride) {
    global("torch._utils", "_rebuild_tensor_v2").op('(');
    op('(').str("storage").global("torch", type).str(key).str("cpu").i(numel).op('t').op('Q');
    i(offset).tuple(size).tuple(stride).op('\x89');
    global("collections", "OrderedDict").op(')').op('R');
    return op('t').op('R');
  }
  std::string done() const { return b + '.'; }
};

TensorMap parse_pickle(const std::string& p) {
  return parse_torch_pickle(reinterpret_cast<const uint8_t*>(p.data()), p.size(), "data.pkl");
}

struct ZipFile {
  std::string name;
  std::string data;
  uint16_t method = 0;
  uint16_t flags = 0;
};

void put16(std::string& s, uint32_t v) {
  s += static_cast<char>(v);
  s += static_cast<char>(v >> 8);
}
void put32(std::string& s, uint32_t v) {
  put16(s, v);
  put16(s, v >> 16);
}
void put64(std::string& s, uint64_t v) {
  put32(s, static_cast<uint32_t>(v));
  put32(s, static_cast<uint32_t>(v >> 32));
}

// A stored-only archive laid out like torch's, optionally with zip64 end records.
std::string make_zip(const std::vector<ZipFile>& files, bool zip64 = false) {
  std::string out, cd;
  for (const ZipFile& f : files) {
    const uint32_t off = static_cast<uint32_t>(out.size());
    const uint32_t crc = crc32(reinterpret_cast<const uint8_t*>(f.data.data()), f.data.size());
    // Pad the local extra field so the data starts 64-byte aligned, as torch does.
    const size_t pad = (64 - (out.size() + 30 + f.name.size() + 4) % 64) % 64;
    put32(out, 0x04034b50);
    put16(out, 20), put16(out, f.flags), put16(out, f.method), put32(out, 0);
    put32(out, crc), put32(out, f.data.size()), put32(out, f.data.size());
    put16(out, f.name.size()), put16(out, 4 + pad);
    out += f.name;
    put16(out, 0x1234), put16(out, pad);
    out += std::string(pad, 'Z') + f.data;
    put32(cd, 0x02014b50);
    put16(cd, 20), put16(cd, 20), put16(cd, f.flags), put16(cd, f.method), put32(cd, 0);
    put32(cd, crc), put32(cd, f.data.size()), put32(cd, f.data.size());
    put16(cd, f.name.size()), put16(cd, zip64 ? 12 : 0), put16(cd, 0);
    put16(cd, 0), put16(cd, 0), put32(cd, 0), put32(cd, zip64 ? 0xffffffffu : off);
    cd += f.name;
    if (zip64) put16(cd, 1), put16(cd, 8), put64(cd, off);
  }
  const uint64_t cd_off = out.size();
  out += cd;
  if (zip64) {
    const uint64_t rec = out.size();
    put32(out, 0x06064b50), put64(out, 44), put16(out, 45), put16(out, 45);
    put32(out, 0), put32(out, 0), put64(out, files.size()), put64(out, files.size());
    put64(out, cd.size()), put64(out, cd_off);
    put32(out, 0x07064b50), put32(out, 0), put64(out, rec), put32(out, 1);
  }
  put32(out, 0x06054b50), put16(out, 0), put16(out, 0);
  put16(out, zip64 ? 0xffff : files.size()), put16(out, zip64 ? 0xffff : files.size());
  put32(out, cd.size()), put32(out, zip64 ? 0xffffffffu : cd_off), put16(out, 0);
  return out;
}

std::string floats(std::initializer_list<float> v) {
  return std::string(reinterpret_cast<const char*>(std::data(v)), v.size() * sizeof(float));
}

// A 2x3 float matrix stored transposed, plus a scalar view at offset 5 of the same storage.
std::string sample_pickle() {
  Pickle p;
  p.global("collections", "OrderedDict").op(')').op('R').op('(');
  p.str("w").tensor("0", "FloatStorage", 6, 0, {2, 3}, {1, 2});
  p.str("s").tensor("0", "FloatStorage", 6, 5, {}, {});
  return p.op('u').done();
}

TEST(TorchPt, ReadsHandBuiltArchiveWithStridedAndSharedViews) {
  for (bool zip64 : {false, true}) {
    SCOPED_TRACE(zip64 ? "zip64" : "zip32");
    const std::string zip = make_zip({{"my_model/data.pkl", sample_pickle()},
                                      {"my_model/byteorder", "little"},
                                      {"my_model/data/0", floats({0, 1, 2, 3, 4, 5})}},
                                     zip64);
    const TensorMap m = parse(zip);
    ASSERT_EQ(m.size(), 2u);
    const Tensor& w = m.at("w");
    ASSERT_EQ(w.shape(), (Shape{2, 3}));
    const float want[] = {0, 2, 4, 1, 3, 5};
    for (int k = 0; k < 6; ++k) EXPECT_EQ(w.f32()[k], want[k]) << k;
    EXPECT_EQ(m.at("s").f32()[0], 5.0f);
  }
}

TEST(TorchPt, RefusesCompressedAndEncryptedEntries) {
  ZipFile pkl{"m/data.pkl", sample_pickle(), 8};
  const std::string msg = error_of([&] {
    parse(make_zip({pkl, {"m/data/0", floats({0, 1, 2, 3, 4, 5})}}));
  });
  EXPECT_NE(msg.find("compressed"), std::string::npos) << msg;
  EXPECT_NE(msg.find("m/data.pkl"), std::string::npos) << msg;

  ZipFile data{"m/data/0", floats({0, 1, 2, 3, 4, 5})};
  data.flags = 1;
  const std::string enc = error_of([&] {
    parse(make_zip({{"m/data.pkl", sample_pickle()}, data}));
  });
  EXPECT_NE(enc.find("m/data/0 is encrypted"), std::string::npos) << enc;
}

TEST(TorchPt, RefusesDisallowedGlobals) {
  Pickle p;
  p.global("os", "system").op('(').str("true").op('t').op('R');
  const std::string msg = error_of([&] { parse_pickle(p.done()); });
  EXPECT_NE(msg.find("disallowed global os.system"), std::string::npos) << msg;

  const std::string zip = make_zip({{"x/data.pkl", p.done()}});
  EXPECT_NE(error_of([&] { parse(zip); }).find("os.system"), std::string::npos);

  Pickle stack;  // STACK_GLOBAL spelling of the same thing
  stack.str("builtins").str("eval").op('\x93').op(')').op('R');
  EXPECT_NE(error_of([&] { parse_pickle(stack.done()); }).find("builtins.eval"), std::string::npos);
}

TEST(TorchPt, BigEndianAndMissingRecordsAreErrors) {
  const std::string data = floats({0, 1, 2, 3, 4, 5});
  EXPECT_NE(error_of([&] {
              parse(make_zip(
                  {{"m/data.pkl", sample_pickle()}, {"m/byteorder", "big"}, {"m/data/0", data}}));
            }).find("byte order"),
            std::string::npos);
  EXPECT_NE(error_of([&] {
              parse(make_zip({{"m/data.pkl", sample_pickle()}}));
            }).find("data/0"),
            std::string::npos);
  EXPECT_NE(error_of([&] {
              parse(make_zip({{"m/data.pkl", sample_pickle()}, {"m/data/0", "abc"}}));
            }).find("data/0"),
            std::string::npos);
  EXPECT_NE(error_of([&] {
              parse(make_zip({{"m/other.txt", "x"}}));
            }).find("data.pkl"),
            std::string::npos);
}

TEST(TorchPt, ViewsOutsideTheirStorageAreErrors) {
  auto one = [](uint8_t numel, uint8_t offset, std::vector<uint8_t> size,
                std::vector<uint8_t> stride) {
    Pickle p;
    p.op('}').op('(').str("t").tensor("0", "FloatStorage", numel, offset, size, stride).op('u');
    return p.done();
  };
  EXPECT_THROW(parse_pickle(one(4, 0, {5}, {1})), Error);
  EXPECT_THROW(parse_pickle(one(4, 3, {2}, {1})), Error);
  EXPECT_THROW(parse_pickle(one(6, 0, {2, 3}, {3, 2})), Error);
  EXPECT_THROW(parse_pickle(one(6, 0, {2, 3}, {1})), Error);  // rank mismatch
  EXPECT_NO_THROW(parse_pickle(one(6, 0, {2, 3}, {1, 2})));
  // A broadcast view (stride 0) reads one element many times.
  const TensorMap m = parse_pickle(one(1, 0, {10}, {0}));
  EXPECT_EQ(m.at("t").shape(), (Shape{10}));
  // Empty tensors need no storage at all.
  EXPECT_EQ(parse_pickle(one(0, 0, {0, 4}, {4, 1})).at("t").numel(), 0);
}

TEST(TorchPt, HostilePicklesAreErrorsNotCrashes) {
  // A list that contains itself, then asked to be a state dict.
  Pickle cycle;
  cycle.op('}').op('q').b += '\x00';
  cycle.str("k").op(']').op('q').b += '\x01';
  cycle.op('h').b += '\x01';
  cycle.op('a').op('s');
  EXPECT_THROW(parse_pickle(cycle.done()), Error);  // endless nesting

  Pickle self_dict;  // dict whose value is itself: depth limit
  self_dict.op('}').op('q').b += '\x00';
  self_dict.str("k").op('h').b += '\x00';
  self_dict.op('s');
  EXPECT_THROW(parse_pickle(self_dict.done()), Error);

  Pickle deep;  // dicts nested 100000 deep: refused without deep recursion
  for (int k = 0; k < 100000; ++k) deep.op('}').str("k");
  deep.op('}');
  for (int k = 0; k < 100000; ++k) deep.op('s');
  EXPECT_THROW(parse_pickle(deep.done()), Error);

  for (const std::string& bad :
       {std::string(""), std::string("\x80\x02"), std::string("\x80\x02."),
        std::string("\x80\x02t."), std::string("\x80\x02h\x05."),
        std::string("\x80\x02X\xff\xff\xff\x7f"), std::string("\x80\x02\x8b\xff\xff\xff\xff."),
        std::string("\x80\x02N\x95"), std::string("\x80\x02}Ku."),
        std::string("\x80\x02K\x01K\x02s."), std::string("\x80\x09N."),
        std::string("\x80\x02\xff."), std::string("\x80\x02cos\nsys")}) {
    EXPECT_THROW(parse_pickle(bad), Error) << testing::PrintToString(bad);
  }
}

// Merging a dict into another copies its items; a pickle must not get more items that way than
// its own bytes describe (found by the fuzzer: a dict merged into itself 40 times needed 2^40).
TEST(TorchPt, PicklesThatMultiplyTheirItemsAreRefused) {
  const pickle::Hooks none;
  Pickle self;  // {1: 2}, then 40 times DUP + BUILD: the dict updated with itself, unchanged
  self.op('}').i(1).i(2).op('s');
  for (int k = 0; k < 40; ++k) self.op('2').op('b');
  const std::string self_bytes = self.op('.').b;
  const pickle::Result r = pickle::unpickle(reinterpret_cast<const uint8_t*>(self_bytes.data()),
                                            self_bytes.size(), none, "self");
  ASSERT_EQ(r.root->kind, pickle::Kind::Dict);
  EXPECT_EQ(r.root->items.size(), 2u);

  Pickle again;  // a memoised state of 200 items merged into one dict 1000 times
  again.op('}').op('(');
  for (int k = 0; k < 100; ++k) again.i(static_cast<uint8_t>(k)).i(0);
  again.op('u').op('q').b += '\x00';
  again.op('}');
  for (int k = 0; k < 1000; ++k) {
    again.op('h').b += '\x00';
    again.op('b');
  }
  const std::string again_bytes = again.op('.').b;
  try {
    pickle::unpickle(reinterpret_cast<const uint8_t*>(again_bytes.data()), again_bytes.size(), none,
                     "again");
    ADD_FAILURE() << "no error";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("BUILD copies more items"), std::string::npos) << e.what();
  }
}

// ---- damaged copies of the fixtures -----------------------------------------------------------

class TorchPtDamage : public test::TempDirTest {
 protected:
  std::string write(const std::string& name, const std::string& bytes) {
    const std::string p = (dir_ / name).string();
    std::ofstream(p, std::ios::binary)
        .write(bytes.data(), static_cast<std::streamsize>(bytes.size()));
    return p;
  }
};

TEST_F(TorchPtDamage, EveryTruncationIsAnError) {
  for (const char* name : {"flat.pt", "nested.pt", "legacy.pt"}) {
    SCOPED_TRACE(name);
    const std::string bytes = read_all(ptcase(name));
    for (size_t n = 0; n < bytes.size(); ++n) EXPECT_THROW(parse(bytes.substr(0, n)), Error) << n;
    for (size_t n : {size_t{0}, size_t{1}, bytes.size() / 2, bytes.size() - 1}) {
      const std::string p = write("cut.pt", bytes.substr(0, n));
      EXPECT_THROW(load_checkpoint(p), Error) << n;
      EXPECT_THROW(read_torch_checkpoint(p), Error) << n;
    }
  }
}

TEST_F(TorchPtDamage, StructuralDamageIsAnError) {
  const std::string good = read_all(ptcase("flat.pt"));
  const size_t eocd = good.rfind(std::string("PK\x05\x06", 4));
  const size_t cd = good.find(std::string("PK\x01\x02", 4));
  ASSERT_NE(eocd, std::string::npos);
  ASSERT_NE(cd, std::string::npos);
  auto damaged = [&](size_t at, char value) {
    std::string b = good;
    b[at] = value;
    return b;
  };
  const size_t eocd64 = good.rfind(std::string("PK\x06\x06", 4));
  ASSERT_NE(eocd64, std::string::npos);  // torch always writes zip64 end records
  std::vector<std::pair<const char*, std::string>> cases = {
      {"zip64 directory offset", damaged(eocd64 + 55, '\x7f')},
      {"zip64 directory size", damaged(eocd64 + 47, '\x7f')},
      {"zip64 entry count", damaged(eocd64 + 32, '\x7f')},
      {"zip64 record signature", damaged(eocd64 + 3, 'X')},
      {"zip64 locator offset", damaged(eocd - 12, '\x01')},
      {"end record signature", damaged(eocd + 1, 'X')},
      {"directory offset", damaged(eocd + 19, '\x7f')},
      {"directory size", damaged(eocd + 15, '\x7f')},
      {"entry count", damaged(eocd + 10, '\x7f')},
      {"central header signature", damaged(cd + 2, 'X')},
      {"central name length", damaged(cd + 29, '\x7f')},
      {"local header offset", damaged(cd + 45, '\x7f')},
      {"compression method", damaged(cd + 10, 8)},
      {"local header signature", damaged(good.find(std::string("PK\x03\x04", 4), 4) + 2, 'X')},
      {"pickle byte (CRC)", damaged(good.find("a.weight"), 'b')},
  };
  // Renaming a tensor record makes it missing.
  std::string renamed = good;
  const size_t rec = renamed.find("flat/data/3", cd);
  ASSERT_NE(rec, std::string::npos);
  renamed[rec + 10] = 'Q';
  cases.emplace_back("record name", renamed);
  for (auto& [what, bytes] : cases) {
    EXPECT_THROW(load_checkpoint(write("bad.pt", bytes)), Error) << what;
  }
}

TEST_F(TorchPtDamage, BitFlipsNeverCrash) {
  // A flip in tensor bytes legitimately goes unnoticed; anywhere else it must be an Error. Either
  // way the reader must neither crash nor read out of bounds (the fuzz build checks the latter).
  for (const char* name : {"flat.pt", "nested.pt", "legacy.pt"}) {
    const std::string good = read_all(ptcase(name));
    size_t errors = 0;
    for (size_t at = 0; at < good.size(); ++at) {
      std::string b = good;
      b[at] = static_cast<char>(b[at] ^ (1 << (at % 8)));
      try {
        parse(b);
      } catch (const Error&) {
        ++errors;
      }
    }
    EXPECT_GT(errors, good.size() / 20) << name;
  }
}

TEST_F(TorchPtDamage, ConvertCommandWritesBf16Safetensors) {
  const std::string out = (dir_ / "out.safetensors").string();
  const std::string cmd = std::string(LINGBOT_CLI) + " convert " + ptcase("nested.pt") + " " + out +
                          " --dtype bf16 > " + (dir_ / "log.txt").string();
  ASSERT_EQ(std::system(cmd.c_str()), 0) << cmd;
  const TensorMap in = read_torch_checkpoint(ptcase("nested.pt"));
  const SafetensorsFile got = read_safetensors(out);
  ASSERT_EQ(got.tensors.size(), in.size());
  for (auto& [name, t] : in) {
    SCOPED_TRACE(name);
    const Tensor& g = got.tensors.at(name);
    EXPECT_EQ(g.shape(), t.shape());
    const bool floating = t.dtype() == DType::F32 || t.dtype() == DType::F16 ||
                          t.dtype() == DType::BF16 || t.dtype() == DType::F64;
    EXPECT_EQ(g.dtype(), floating ? DType::BF16 : t.dtype());
    if (floating) {
      const Tensor want = t.to(DType::BF16);
      ASSERT_EQ(g.nbytes(), want.nbytes());
      if (g.nbytes()) EXPECT_EQ(std::memcmp(g.raw(), want.raw(), g.nbytes()), 0);
    }
  }
  EXPECT_NE(
      std::system(
          (std::string(LINGBOT_CLI) + " convert /nonexistent.pt " + out + " 2> /dev/null").c_str()),
      0);
}

}  // namespace
}  // namespace lingbot
