// The image files of a folder, in natural order.
#include <algorithm>
#include <cctype>
#include <filesystem>

#include "io/image.h"
#include "lingbot/error.h"

namespace lingbot {

namespace fs = std::filesystem;

bool natural_less(const std::string& a, const std::string& b) {
  size_t i = 0, j = 0;
  auto digit = [](char c) { return c >= '0' && c <= '9'; };
  while (i < a.size() && j < b.size()) {
    if (digit(a[i]) && digit(b[j])) {
      size_t i0 = i, j0 = j;
      while (i < a.size() && digit(a[i])) ++i;
      while (j < b.size() && digit(b[j])) ++j;
      // Compare by value: skip leading zeros, then longer is larger, then digit by digit.
      size_t ia = i0, jb = j0;
      while (ia + 1 < i && a[ia] == '0') ++ia;
      while (jb + 1 < j && b[jb] == '0') ++jb;
      if (i - ia != j - jb) return i - ia < j - jb;
      const int c = a.compare(ia, i - ia, b, jb, j - jb);
      if (c != 0) return c < 0;
      // Equal values: fewer leading zeros first, so the order stays total ("1" < "01").
      if (i - i0 != j - j0) return i - i0 < j - j0;
    } else {
      if (a[i] != b[j]) return uint8_t(a[i]) < uint8_t(b[j]);
      ++i, ++j;
    }
  }
  return a.size() - i < b.size() - j;
}

std::vector<std::string> list_images(const std::string& dir) {
  std::error_code ec;
  if (!fs::is_directory(dir, ec))
    throw fs::exists(dir, ec) ? Error(dir + ": is not a folder", ErrorKind::InvalidArgument)
                              : Error(dir + ": no such folder", ErrorKind::NotFound);
  std::vector<std::pair<std::string, std::string>> found;  // (file name, full path)
  fs::directory_iterator it(dir, ec), end;
  if (ec) throw Error(dir + ": cannot list the folder (" + ec.message() + ")");
  for (; it != end; it.increment(ec)) {
    if (ec) throw Error(dir + ": cannot list the folder (" + ec.message() + ")");
    if (!it->is_regular_file(ec)) continue;
    std::string ext = it->path().extension().string();
    std::transform(ext.begin(), ext.end(), ext.begin(),
                   [](unsigned char c) { return char(std::tolower(c)); });
    if (ext == ".png" || ext == ".jpg" || ext == ".jpeg")
      found.emplace_back(it->path().filename().string(), it->path().string());
  }
  if (found.empty()) throw Error(dir + ": the folder holds no .png, .jpg or .jpeg images");
  std::sort(found.begin(), found.end(),
            [](const auto& x, const auto& y) { return natural_less(x.first, y.first); });
  std::vector<std::string> paths;
  for (auto& f : found) paths.push_back(std::move(f.second));
  return paths;
}

}  // namespace lingbot
