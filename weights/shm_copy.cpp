#include "weights/shm_copy.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

namespace moerl::weights {
namespace {

error io_failure(const std::string& what, const std::string& path, int e) {
  return error(e == ENOENT ? errc::not_found : errc::io_error,
               what + " " + path + ": " + std::strerror(e));
}

}  // namespace

result<std::unique_ptr<shm_copy>> shm_copy::publish(uint64_t version, std::string_view bytes,
                                                    bool sharded, uint32_t shard) {
  const std::string path = "/dev/shm/" + std::to_string(::getpid()) + ":weights:v" +
                           std::to_string(version) +
                           (sharded ? "s" + std::to_string(shard) : std::string());
  ::unlink(path.c_str());  // a copy of this version published before and not removed
  const int fd = ::open(path.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0644);
  if (fd < 0) return io_failure("create", path, errno);
  std::unique_ptr<shm_copy> copy(new shm_copy(version, path));  // removes the file on failure
  size_t done = 0;
  while (done < bytes.size()) {
    const ssize_t n = ::write(fd, bytes.data() + done, bytes.size() - done);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) {
      const int e = n < 0 ? errno : ENOSPC;
      ::close(fd);
      return io_failure("write", path, e);
    }
    done += static_cast<size_t>(n);
  }
  if (::close(fd) != 0) return io_failure("close", path, errno);
  return copy;
}

shm_copy::~shm_copy() { ::unlink(path_.c_str()); }

result<std::string> read_shm_copy(const std::string& path, uint64_t num_bytes) {
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) return io_failure("open", path, errno);
  struct stat st {};
  if (::fstat(fd, &st) != 0) {
    const int e = errno;
    ::close(fd);
    return io_failure("stat", path, e);
  }
  if (static_cast<uint64_t>(st.st_size) != num_bytes) {
    ::close(fd);
    return error(errc::invalid_argument, path + " holds " + std::to_string(st.st_size) +
                                             " bytes, the version " + std::to_string(num_bytes));
  }
  if (num_bytes == 0) {
    ::close(fd);
    return std::string();
  }
  void* p = ::mmap(nullptr, num_bytes, PROT_READ, MAP_SHARED, fd, 0);
  const int e = errno;
  ::close(fd);  // the mapping stays valid
  if (p == MAP_FAILED) return io_failure("mmap", path, e);
  std::string out(static_cast<const char*>(p), num_bytes);
  ::munmap(p, num_bytes);
  return out;
}

}  // namespace moerl::weights
