#include "weights/shm_copy.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

#include "common/host_identity.h"

namespace moerl::weights {
namespace {

// What a reader needs sealed before it trusts the bytes without hashing them: nobody can
// write (write(2) or a new writable mapping), truncate or extend the file any more.
constexpr int kImmutable = F_SEAL_WRITE | F_SEAL_SHRINK | F_SEAL_GROW;

error io_failure(const std::string& what, const std::string& path, int e) {
  return error(e == ENOENT ? errc::not_found : errc::io_error,
               what + " " + path + ": " + std::strerror(e));
}

int create_sealable_memfd(const std::string& name) {
#ifdef MFD_NOEXEC_SEAL
  // Kernels with vm.memfd_noexec=2 refuse executable memfds; kernels before 6.3 do not know
  // the flag (EINVAL) and get the plain one.
  const int fd = ::memfd_create(name.c_str(), MFD_ALLOW_SEALING | MFD_CLOEXEC | MFD_NOEXEC_SEAL);
  if (fd >= 0 || errno != EINVAL) return fd;
#endif
  return ::memfd_create(name.c_str(), MFD_ALLOW_SEALING | MFD_CLOEXEC);
}

// Copies `num_bytes` from `src` into a new string in one pass. Its buffer is a fresh mapping
// (glibc mmaps allocations this large), so the copy would page-fault every 4 KiB of it; asking
// for transparent huge pages first makes that one fault per 2 MiB where the kernel allows
// (bench/weights: measured in docs/GUIDE.md).
std::string copy_out(const char* src, uint64_t num_bytes) {
  std::string out;
  out.reserve(num_bytes);
  constexpr uintptr_t kHuge = uintptr_t{2} << 20;
  const auto begin = reinterpret_cast<uintptr_t>(out.data());
  const uintptr_t first = (begin + kHuge - 1) & ~(kHuge - 1);
  const uintptr_t last = (begin + num_bytes) & ~(kHuge - 1);
  if (last > first)  // advice only: without THP the copy faults 4 KiB pages as before
    ::madvise(reinterpret_cast<void*>(first), last - first, MADV_HUGEPAGE);
  out.append(src, num_bytes);  // within the capacity reserved: no reallocation
  return out;
}

}  // namespace

std::string same_host_identity() { return host_identity({"net", "mnt", "pid"}); }

result<std::unique_ptr<shm_copy>> shm_copy::publish(uint64_t version, std::string_view bytes,
                                                    bool sharded, uint32_t shard) {
  const std::string name = "moerl-weights-v" + std::to_string(version) +
                           (sharded ? "s" + std::to_string(shard) : std::string());
  const int fd = create_sealable_memfd(name);
  if (fd < 0) return io_failure("memfd_create", name, errno);
  std::unique_ptr<shm_copy> copy(new shm_copy(version, fd));  // closes the fd on failure
  size_t done = 0;
  while (done < bytes.size()) {
    const ssize_t n = ::write(fd, bytes.data() + done, bytes.size() - done);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) return io_failure("write", name, n < 0 ? errno : ENOSPC);
    done += static_cast<size_t>(n);
  }
  if (::fcntl(fd, F_ADD_SEALS, kImmutable | F_SEAL_SEAL) != 0)
    return io_failure("seal", name, errno);
  struct stat st {};
  if (::fstat(fd, &st) != 0) return io_failure("stat", name, errno);
  copy->inode_ = st.st_ino;
  copy->path_ = "/proc/" + std::to_string(::getpid()) + "/fd/" + std::to_string(fd);
  return copy;
}

shm_copy::~shm_copy() { ::close(fd_); }

result<same_host_bytes> read_shm_copy(const std::string& path, uint64_t num_bytes, uint64_t inode) {
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) return io_failure("open", path, errno);
  struct closer {
    int fd;
    ~closer() { ::close(fd); }  // a mapping stays valid after its descriptor closes
  } close_fd{fd};
  struct stat st {};
  if (::fstat(fd, &st) != 0) return io_failure("stat", path, errno);
  if (inode != 0 && st.st_ino != inode)
    return error(errc::invalid_argument, path + " is inode " + std::to_string(st.st_ino) +
                                             ", not the cache's copy (inode " +
                                             std::to_string(inode) +
                                             "): the cache moved on or its pid was reused");
  if (static_cast<uint64_t>(st.st_size) != num_bytes)
    return error(errc::invalid_argument, path + " holds " + std::to_string(st.st_size) +
                                             " bytes, the version " + std::to_string(num_bytes));
  // A file that cannot be sealed (not shmem: EINVAL) or is not sealed is read all the same;
  // the caller hashes it.
  const int seals = ::fcntl(fd, F_GET_SEALS);
  same_host_bytes out;
  out.sealed = inode != 0 && seals >= 0 && (seals & kImmutable) == kImmutable;
  if (num_bytes == 0) return out;
  // MAP_POPULATE maps every page of the copy in one call instead of one fault per 4 KiB.
  void* p = ::mmap(nullptr, num_bytes, PROT_READ, MAP_SHARED | MAP_POPULATE, fd, 0);
  if (p == MAP_FAILED) return io_failure("mmap", path, errno);
  out.bytes = copy_out(static_cast<const char*>(p), num_bytes);
  ::munmap(p, num_bytes);
  return out;
}

}  // namespace moerl::weights
