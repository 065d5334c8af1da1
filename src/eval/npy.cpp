// NumPy's .npy format: magic, version, header length, a Python dict literal, then the data.
#include "eval/npy.h"

#include <charconv>
#include <cmath>
#include <cstring>
#include <limits>

#include "lingbot/error.h"

namespace lingbot::eval {
namespace {

[[noreturn]] void bad(const std::string& what, const std::string& why) {
  throw Error(what + ": not a usable .npy file (" + why + ")", ErrorKind::InvalidArgument);
}

// The value after 'key': in the header dict, up to (not including) the first of `ends`.
std::string_view field(std::string_view dict, std::string_view key, const std::string& what) {
  const std::string quoted = "'" + std::string(key) + "'";
  const size_t at = dict.find(quoted);
  if (at == std::string_view::npos) bad(what, "no " + std::string(key) + " in its header");
  size_t p = dict.find(':', at + quoted.size());
  if (p == std::string_view::npos) bad(what, "damaged header");
  ++p;
  while (p < dict.size() && dict[p] == ' ') ++p;
  return dict.substr(p);
}

double half_to_double(uint16_t h) {
  const int e = (h >> 10) & 0x1f, m = h & 0x3ff;
  const double sign = (h & 0x8000) ? -1.0 : 1.0;
  if (e == 0) return sign * std::ldexp(m, -24);
  if (e == 31)
    return m ? std::numeric_limits<double>::quiet_NaN()
             : sign * std::numeric_limits<double>::infinity();
  return sign * std::ldexp(1024 + m, e - 25);
}

}  // namespace

Npy parse_npy(std::string_view b, const std::string& what) {
  if (b.size() < 10 || std::memcmp(b.data(), "\x93NUMPY", 6) != 0) bad(what, "no NumPy magic");
  const auto major = static_cast<uint8_t>(b[6]);
  if (major < 1 || major > 3) bad(what, "format version " + std::to_string(major));
  size_t header_len = 0, start = 0;
  const auto byte = [&](size_t i) { return static_cast<size_t>(static_cast<uint8_t>(b[i])); };
  if (major == 1) {
    header_len = byte(8) | byte(9) << 8;
    start = 10;
  } else {
    if (b.size() < 12) bad(what, "truncated header");
    header_len = byte(8) | byte(9) << 8 | byte(10) << 16 | byte(11) << 24;
    start = 12;
  }
  if (header_len > b.size() - start) bad(what, "truncated header");
  const std::string_view dict = b.substr(start, header_len);
  const std::string_view data = b.substr(start + header_len);

  std::string_view descr = field(dict, "descr", what);
  if (descr.size() < 2 || descr[0] != '\'') bad(what, "damaged descr");
  descr =
      descr.substr(1, descr.find('\'', 1) == std::string_view::npos ? 0 : descr.find('\'', 1) - 1);
  if (descr.size() < 3 || (descr[0] != '<' && descr[0] != '|'))
    bad(what, "dtype '" + std::string(descr.substr(0, 16)) + "': only little-endian numbers");
  const char kind = descr[1];
  int size = 0;
  if (std::from_chars(descr.data() + 2, descr.data() + descr.size(), size).ec != std::errc() ||
      !((kind == 'f' && (size == 2 || size == 4 || size == 8)) ||
        ((kind == 'u' || kind == 'i') && (size == 1 || size == 2 || size == 4 || size == 8))))
    bad(what, "dtype '" + std::string(descr.substr(0, 16)) + "'");

  if (field(dict, "fortran_order", what).substr(0, 5) != "False")
    bad(what, "Fortran order; save a C-ordered array");

  const std::string_view shape_text = field(dict, "shape", what);
  if (shape_text.empty() || shape_text[0] != '(') bad(what, "damaged shape");
  const size_t close = shape_text.find(')');
  if (close == std::string_view::npos) bad(what, "damaged shape");
  Npy out;
  out.integer = kind != 'f';
  uint64_t count = 1;
  for (size_t p = 1; p < close;) {
    while (p < close && (shape_text[p] == ' ' || shape_text[p] == ',')) ++p;
    if (p >= close) break;
    int64_t d = 0;
    const auto r = std::from_chars(shape_text.data() + p, shape_text.data() + close, d);
    if (r.ec != std::errc() || d < 0) bad(what, "damaged shape");
    p = static_cast<size_t>(r.ptr - shape_text.data());
    if (p < close && shape_text[p] == 'L') ++p;  // Python 2's long
    if (d > 0 && count > (uint64_t(1) << 40) / static_cast<uint64_t>(d))
      bad(what, "shape too large");
    count *= static_cast<uint64_t>(d);
    out.shape.push_back(d);
    if (out.shape.size() > 8) bad(what, "more than 8 dimensions");
  }
  if (count > data.size() / static_cast<size_t>(size))
    bad(what, "the data is shorter than its shape says");
  out.values.resize(count);
  const auto* p = reinterpret_cast<const uint8_t*>(data.data());
  for (size_t i = 0; i < count; ++i, p += size) {
    uint64_t u = 0;
    for (int k = 0; k < size; ++k) u |= uint64_t(p[k]) << (8 * k);
    double v = 0;
    if (kind == 'f') {
      if (size == 2) {
        v = half_to_double(static_cast<uint16_t>(u));
      } else if (size == 4) {
        float f;
        const auto w = static_cast<uint32_t>(u);
        std::memcpy(&f, &w, 4);
        v = f;
      } else {
        std::memcpy(&v, &u, 8);
      }
    } else if (kind == 'u') {
      v = static_cast<double>(u);
    } else {
      const int shift = 64 - 8 * size;  // sign-extend
      v = static_cast<double>(static_cast<int64_t>(u << shift) >> shift);
    }
    out.values[i] = v;
  }
  return out;
}

}  // namespace lingbot::eval
