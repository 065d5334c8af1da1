// The lines of numbers that trajectory and timestamp files are made of.
#pragma once

#include <charconv>
#include <cmath>
#include <string>
#include <string_view>
#include <vector>

#include "lingbot/error.h"

namespace lingbot::eval {

// Calls fn(line_number, numbers) for each line that is not blank or a '#' comment; numbers are
// separated by spaces, tabs or commas. With first_only, only each line's first field is read
// (the rest may be file names, as in a TUM rgb.txt). Throws Error naming `what` and the line for
// a field that is not a finite number.
template <class Fn>
void for_each_line(std::string_view text, const std::string& what, Fn&& fn,
                   bool first_only = false) {
  std::vector<double> values;
  size_t line = 0, pos = 0;
  while (pos < text.size()) {
    size_t end = text.find('\n', pos);
    if (end == std::string_view::npos) end = text.size();
    std::string_view s = text.substr(pos, end - pos);
    pos = end + 1;
    ++line;
    const auto is_sep = [](char c) {
      return c == ' ' || c == '\t' || c == ',' || c == '\r' || c == '\v' || c == '\f';
    };
    size_t i = 0;
    while (i < s.size() && is_sep(s[i])) ++i;
    if (i == s.size() || s[i] == '#') continue;
    values.clear();
    while (i < s.size()) {
      size_t j = i;
      while (j < s.size() && !is_sep(s[j])) ++j;
      const std::string_view field = s.substr(i, j - i);
      // from_chars takes no leading '+', which printf-style writers may emit.
      std::string_view digits = field.size() > 1 && field[0] == '+' ? field.substr(1) : field;
      double v = 0;
      const auto r = std::from_chars(digits.data(), digits.data() + digits.size(), v);
      if (r.ec != std::errc() || r.ptr != digits.data() + digits.size() || !std::isfinite(v)) {
        std::string shown(field.substr(0, 40));
        for (char& c : shown)
          if (static_cast<unsigned char>(c) < 32 || static_cast<unsigned char>(c) > 126) c = '?';
        throw Error(what + ":" + std::to_string(line) + ": '" + shown + "' is not a finite number",
                    ErrorKind::InvalidArgument);
      }
      values.push_back(v);
      if (first_only) break;
      i = j;
      while (i < s.size() && is_sep(s[i])) ++i;
    }
    fn(line, values);
  }
}

// The number of fields on the first line that is not blank or a comment (0 if none).
inline size_t first_line_fields(std::string_view text) {
  size_t pos = 0;
  const auto is_sep = [](char c) {
    return c == ' ' || c == '\t' || c == ',' || c == '\r' || c == '\v' || c == '\f';
  };
  while (pos < text.size()) {
    size_t end = text.find('\n', pos);
    if (end == std::string_view::npos) end = text.size();
    std::string_view s = text.substr(pos, end - pos);
    pos = end + 1;
    size_t i = 0, fields = 0;
    while (i < s.size() && is_sep(s[i])) ++i;
    if (i == s.size() || s[i] == '#') continue;
    while (i < s.size()) {
      ++fields;
      while (i < s.size() && !is_sep(s[i])) ++i;
      while (i < s.size() && is_sep(s[i])) ++i;
    }
    return fields;
  }
  return 0;
}

}  // namespace lingbot::eval
