// PLY point clouds in: the vertices' positions, from any of the three encodings. Every count is
// checked against the bytes there are before anything is allocated, since the file is input.
#include <charconv>
#include <cmath>
#include <cstring>
#include <fstream>
#include <sstream>

#include "lingbot/error.h"
#include "lingbot/eval.h"

namespace lingbot::eval {
namespace {

struct Property {
  std::string name;
  int size = 0;       // bytes of a value (binary)
  char kind = 'f';    // 'f' float, 'i' signed, 'u' unsigned
  bool list = false;  // a list: count of type (count_size, count_kind), then the values
  int count_size = 0;
  char count_kind = 'u';
};

struct Element {
  std::string name;
  uint64_t count = 0;
  std::vector<Property> props;
};

[[noreturn]] void bad(const std::string& what, const std::string& why) {
  throw Error(what + ": not a usable PLY file (" + why + ")", ErrorKind::InvalidArgument);
}

bool type_of(const std::string& t, int& size, char& kind) {
  static const struct {
    const char* name;
    int size;
    char kind;
  } types[] = {{"char", 1, 'i'},  {"int8", 1, 'i'},    {"uchar", 1, 'u'},  {"uint8", 1, 'u'},
               {"short", 2, 'i'}, {"int16", 2, 'i'},   {"ushort", 2, 'u'}, {"uint16", 2, 'u'},
               {"int", 4, 'i'},   {"int32", 4, 'i'},   {"uint", 4, 'u'},   {"uint32", 4, 'u'},
               {"float", 4, 'f'}, {"float32", 4, 'f'}, {"double", 8, 'f'}, {"float64", 8, 'f'}};
  for (const auto& x : types)
    if (t == x.name) {
      size = x.size;
      kind = x.kind;
      return true;
    }
  return false;
}

double decode(const uint8_t* p, int size, char kind, bool big_endian) {
  uint64_t u = 0;
  for (int k = 0; k < size; ++k) u |= uint64_t(p[big_endian ? size - 1 - k : k]) << (8 * k);
  if (kind == 'u') return static_cast<double>(u);
  if (kind == 'i') {
    const int shift = 64 - 8 * size;
    return static_cast<double>(static_cast<int64_t>(u << shift) >> shift);
  }
  if (size == 4) {
    float f;
    const auto w = static_cast<uint32_t>(u);
    std::memcpy(&f, &w, 4);
    return f;
  }
  double d;
  std::memcpy(&d, &u, 8);
  return d;
}

std::vector<std::string> words(std::string_view line) {
  std::vector<std::string> w;
  std::istringstream s{std::string(line)};
  for (std::string x; s >> x;) w.push_back(x);
  return w;
}

}  // namespace

PointCloud parse_ply(std::string_view b, const std::string& what) {
  // Header: lines up to "end_header".
  size_t pos = 0;
  const auto next_line = [&]() -> std::string_view {
    const size_t end = b.find('\n', pos);
    if (end == std::string_view::npos) bad(what, "the header has no end_header");
    std::string_view l = b.substr(pos, end - pos);
    pos = end + 1;
    if (!l.empty() && l.back() == '\r') l.remove_suffix(1);
    return l;
  };
  if (next_line() != "ply") bad(what, "no 'ply' magic");
  int format = -1;  // 0 ascii, 1 little-endian, 2 big-endian
  std::vector<Element> elements;
  for (;;) {
    if (pos > (1 << 20)) bad(what, "a header over 1 MiB");
    const std::string_view line = next_line();
    const auto w = words(line);
    if (w.empty() || w[0] == "comment" || w[0] == "obj_info") continue;
    if (w[0] == "end_header") break;
    if (w[0] == "format" && w.size() >= 2) {
      format = w[1] == "ascii"                  ? 0
               : w[1] == "binary_little_endian" ? 1
               : w[1] == "binary_big_endian"    ? 2
                                                : -1;
      if (format < 0) bad(what, "format " + w[1].substr(0, 32));
    } else if (w[0] == "element" && w.size() == 3) {
      Element e;
      e.name = w[1];
      const auto r = std::from_chars(w[2].data(), w[2].data() + w[2].size(), e.count);
      if (r.ec != std::errc() || r.ptr != w[2].data() + w[2].size()) bad(what, "element count");
      elements.push_back(e);
    } else if (w[0] == "property" && !elements.empty()) {
      Property p;
      if (w.size() == 5 && w[1] == "list") {
        p.list = true;
        if (!type_of(w[2], p.count_size, p.count_kind) || p.count_kind == 'f' ||
            !type_of(w[3], p.size, p.kind))
          bad(what, "property type");
        p.name = w[4];
      } else if (w.size() == 3) {
        if (!type_of(w[1], p.size, p.kind)) bad(what, "property type " + w[1].substr(0, 32));
        p.name = w[2];
      } else {
        bad(what, "a property line with " + std::to_string(w.size()) + " words");
      }
      elements.back().props.push_back(p);
    } else {
      bad(what, "header line '" + std::string(line.substr(0, 40)) + "'");
    }
  }
  if (format < 0) bad(what, "no format line");

  PointCloud cloud;
  cloud.name = what;
  const auto* data = reinterpret_cast<const uint8_t*>(b.data());
  for (const Element& e : elements) {
    const bool vertex = e.name == "vertex";
    int xi = -1, yi = -1, zi = -1;
    if (vertex) {
      for (size_t k = 0; k < e.props.size(); ++k) {
        if (e.props[k].list) continue;
        if (e.props[k].name == "x") xi = static_cast<int>(k);
        if (e.props[k].name == "y") yi = static_cast<int>(k);
        if (e.props[k].name == "z") zi = static_cast<int>(k);
      }
      if (xi < 0 || yi < 0 || zi < 0) bad(what, "the vertices have no x, y, z");
      // Even ASCII needs 6 bytes a vertex ("0 0 0\n"): a count beyond that is a lie.
      if (e.count > (b.size() - pos) / (format == 0 ? 6 : 1)) bad(what, "more vertices than bytes");
      cloud.xyz.reserve(static_cast<size_t>(e.count) * 3);
    }
    std::vector<double> row(e.props.size());
    for (uint64_t i = 0; i < e.count; ++i) {
      if (format == 0) {
        const size_t end = b.find('\n', pos);
        std::string_view line =
            b.substr(pos, end == std::string_view::npos ? b.size() - pos : end - pos);
        if (pos >= b.size()) bad(what, "the data ends early");
        pos = end == std::string_view::npos ? b.size() : end + 1;
        if (!vertex) continue;  // an element per line, whatever it holds
        const auto w = words(line);
        size_t at = 0;
        for (size_t k = 0; k < e.props.size(); ++k) {
          const Property& p = e.props[k];
          size_t n = 1;
          if (p.list) {
            if (at >= w.size()) bad(what, "a vertex line too short");
            const auto r = std::from_chars(w[at].data(), w[at].data() + w[at].size(), n);
            if (r.ec != std::errc() || n > w.size()) bad(what, "a list count");
            ++at;
          }
          for (size_t m = 0; m < n; ++m, ++at) {
            if (at >= w.size()) bad(what, "a vertex line too short");
            double v = 0;
            const auto r = std::from_chars(w[at].data(), w[at].data() + w[at].size(), v);
            if (r.ec != std::errc()) bad(what, "'" + w[at].substr(0, 32) + "' is not a number");
            if (!p.list) row[k] = v;
          }
        }
      } else {
        for (size_t k = 0; k < e.props.size(); ++k) {
          const Property& p = e.props[k];
          uint64_t n = 1;
          if (p.list) {
            if (static_cast<size_t>(p.count_size) > b.size() - pos)
              bad(what, "the data ends early");
            n = static_cast<uint64_t>(decode(data + pos, p.count_size, p.count_kind, format == 2));
            pos += static_cast<size_t>(p.count_size);
          }
          if (n > (b.size() - pos) / static_cast<size_t>(p.size)) bad(what, "the data ends early");
          if (!p.list) row[k] = decode(data + pos, p.size, p.kind, format == 2);
          pos += static_cast<size_t>(n) * static_cast<size_t>(p.size);
        }
      }
      if (vertex) {
        const double x = row[static_cast<size_t>(xi)], y = row[static_cast<size_t>(yi)],
                     z = row[static_cast<size_t>(zi)];
        if (!std::isfinite(x) || !std::isfinite(y) || !std::isfinite(z))
          bad(what, "vertex " + std::to_string(i) + " is not finite");
        cloud.xyz.insert(cloud.xyz.end(), {x, y, z});
      }
    }
    if (vertex) break;  // nothing after the vertices is needed
  }
  if (cloud.xyz.empty()) bad(what, "no vertices");
  return cloud;
}

PointCloud read_ply(const std::string& path) {
  std::ifstream f(path, std::ios::binary);
  if (!f) throw Error("no point cloud file: " + path, ErrorKind::NotFound);
  std::ostringstream s;
  s << f.rdbuf();
  return parse_ply(s.str(), path);
}

void transform_points(PointCloud& c, const Similarity& s) {
  const auto& r = s.rotation;
  for (size_t i = 0; i + 2 < c.xyz.size(); i += 3) {
    const double x = c.xyz[i], y = c.xyz[i + 1], z = c.xyz[i + 2];
    for (int k = 0; k < 3; ++k)
      c.xyz[i + k] =
          s.scale * (r[3 * k] * x + r[3 * k + 1] * y + r[3 * k + 2] * z) + s.translation[k];
  }
}

}  // namespace lingbot::eval
