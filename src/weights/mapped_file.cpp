#include "weights/mapped_file.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

#include "lingbot/error.h"

namespace lingbot {

MappedFile map_file(const std::string& path) {
  int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) {
    const int e = errno;
    throw Error("cannot open " + path + ": " + std::strerror(e),
                e == ENOENT ? ErrorKind::NotFound : ErrorKind::Failure);
  }
  struct stat st {};
  if (::fstat(fd, &st) != 0 || !S_ISREG(st.st_mode)) {
    ::close(fd);
    throw Error(path + " is not a regular file");
  }
  MappedFile f;
  f.size = static_cast<size_t>(st.st_size);
  if (f.size == 0) {
    ::close(fd);
    throw Error(path + " is empty");
  }
  void* p = ::mmap(nullptr, f.size, PROT_READ, MAP_PRIVATE, fd, 0);
  ::close(fd);
  if (p == MAP_FAILED) throw Error("cannot map " + path + ": " + std::strerror(errno));
  size_t size = f.size;
  f.data = static_cast<const uint8_t*>(p);
  f.owner = std::shared_ptr<void>(p, [size](void* q) { ::munmap(q, size); });
  return f;
}

}  // namespace lingbot
