#include "fabric/internal/host_inbox.h"

#include <fcntl.h>
#include <linux/futex.h>
#include <sys/mman.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <climits>
#include <ctime>
#include <utility>

#include "common/status_try.h"

namespace moerl::fabric {

namespace {

// Header: the doorbell word at 0, the number of sleepers at 64; rings from 128. Ring: tail
// (producer) at 0, head (consumer) at 64, slots from 128. Separate cache lines, so producer
// and consumer do not share one.
constexpr size_t header_bytes = 128, ring_header_bytes = 128;

uint32_t* doorbell(char* base) { return reinterpret_cast<uint32_t*>(base); }
uint32_t* sleepers(char* base) { return reinterpret_cast<uint32_t*>(base + 64); }
uint64_t* tail_of(char* ring) { return reinterpret_cast<uint64_t*>(ring); }
uint64_t* head_of(char* ring) { return reinterpret_cast<uint64_t*>(ring + 64); }
uint32_t* slots_of(char* ring) { return reinterpret_cast<uint32_t*>(ring + ring_header_bytes); }

result<char*> map_fd(int fd, size_t size) {
  void* p = ::mmap(nullptr, size, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
  if (p == MAP_FAILED) return error{errc::io_error, "host inbox: mmap failed"};
  return static_cast<char*>(p);
}

}  // namespace

result<host_inbox> host_inbox::create() {
  host_inbox in;
  in.fd_ = ::memfd_create("moerl-ep-inbox", MFD_CLOEXEC);
  if (in.fd_ < 0) return error{errc::io_error, "host inbox: memfd_create failed"};
  if (::ftruncate(in.fd_, static_cast<off_t>(bytes)) != 0)
    return error{errc::io_error, "host inbox: ftruncate failed"};
  ASSIGN_OR_RETURN(auto p, map_fd(in.fd_, bytes));
  in.base_ = p;
  in.size_ = bytes;
  in.owned_map_ = true;
  return in;
}

result<host_inbox> host_inbox::attach(int64_t pid, int64_t fd, uint64_t owner_addr,
                                      bool same_process) {
  host_inbox in;
  if (same_process) {
    in.base_ = reinterpret_cast<char*>(owner_addr);
    in.size_ = bytes;
    return in;
  }
  const std::string path = "/proc/" + std::to_string(pid) + "/fd/" + std::to_string(fd);
  const int f = ::open(path.c_str(), O_RDWR | O_CLOEXEC);
  if (f < 0) return error{errc::peer_dead, "host inbox: cannot open " + path};
  auto p = map_fd(f, bytes);
  ::close(f);
  if (!p) return p.err();
  in.base_ = *p;
  in.size_ = bytes;
  in.owned_map_ = true;
  return in;
}

host_inbox::host_inbox(host_inbox&& o) noexcept { *this = std::move(o); }

host_inbox& host_inbox::operator=(host_inbox&& o) noexcept {
  if (this != &o) {
    this->~host_inbox();
    base_ = std::exchange(o.base_, nullptr);
    size_ = o.size_;
    fd_ = std::exchange(o.fd_, -1);
    owned_map_ = std::exchange(o.owned_map_, false);
    num_ranks_ = o.num_ranks_;
    capacity_ = o.capacity_;
    ring_stride_ = o.ring_stride_;
  }
  return *this;
}

host_inbox::~host_inbox() {
  if (base_ && owned_map_) ::munmap(base_, size_);
  if (fd_ >= 0) ::close(fd_);
  base_ = nullptr;
  fd_ = -1;
}

void host_inbox::set_num_ranks(int num_ranks) {
  num_ranks_ = num_ranks;
  const size_t per = (bytes - header_bytes) / static_cast<size_t>(num_ranks);
  capacity_ = 1;
  while ((capacity_ * 2) * 4 + ring_header_bytes <= per && capacity_ < (uint64_t(1) << 20))
    capacity_ *= 2;
  ring_stride_ = ring_header_bytes + capacity_ * 4;
  ring_stride_ = (ring_stride_ + 63) / 64 * 64;
}

char* host_inbox::ring(int src) const {
  return base_ + header_bytes + static_cast<size_t>(src) * ring_stride_;
}

bool host_inbox::try_push(int src, uint32_t imm) {
  char* r = ring(src);
  const uint64_t t = __atomic_load_n(tail_of(r), __ATOMIC_RELAXED);  // only we write it
  if (t - __atomic_load_n(head_of(r), __ATOMIC_ACQUIRE) >= capacity_) return false;
  slots_of(r)[t & (capacity_ - 1)] = imm;
  // Release: the write's bytes and the slot are visible before the new tail.
  __atomic_store_n(tail_of(r), t + 1, __ATOMIC_RELEASE);
  return true;
}

void host_inbox::ring() {
  // seq_cst on both sides (here and in sleep()): either we see the sleeper and wake it, or
  // it sees our tail before it sleeps.
  __atomic_fetch_add(doorbell(base_), 1, __ATOMIC_SEQ_CST);
  if (__atomic_load_n(sleepers(base_), __ATOMIC_SEQ_CST) > 0)
    ::syscall(SYS_futex, doorbell(base_), FUTEX_WAKE, INT_MAX, nullptr, nullptr, 0);
}

bool host_inbox::drain(std::vector<uint32_t>& imms) {
  bool any = false;
  for (int s = 0; s < num_ranks_; ++s) {
    char* r = ring(s);
    const uint64_t h = __atomic_load_n(head_of(r), __ATOMIC_RELAXED);  // only we write it
    const uint64_t t = __atomic_load_n(tail_of(r), __ATOMIC_ACQUIRE);
    if (t == h) continue;
    for (uint64_t i = h; i < t; ++i) imms.push_back(slots_of(r)[i & (capacity_ - 1)]);
    __atomic_store_n(head_of(r), t, __ATOMIC_RELEASE);
    any = true;
  }
  return any;
}

bool host_inbox::any_pending() const {
  for (int s = 0; s < num_ranks_; ++s) {
    char* r = ring(s);
    if (__atomic_load_n(tail_of(r), __ATOMIC_ACQUIRE) !=
        __atomic_load_n(head_of(r), __ATOMIC_RELAXED))
      return true;
  }
  return false;
}

void host_inbox::sleep(int64_t max_ns) {
  __atomic_fetch_add(sleepers(base_), 1, __ATOMIC_SEQ_CST);
  const uint32_t seen = __atomic_load_n(doorbell(base_), __ATOMIC_SEQ_CST);
  if (!any_pending()) {
    timespec ts{static_cast<time_t>(max_ns / 1000000000), static_cast<long>(max_ns % 1000000000)};
    ::syscall(SYS_futex, doorbell(base_), FUTEX_WAIT, seen, &ts, nullptr, 0);
  }
  __atomic_fetch_sub(sleepers(base_), 1, __ATOMIC_SEQ_CST);
}

}  // namespace moerl::fabric
