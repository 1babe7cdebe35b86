// A rank's inbox for immediates from same-host peers: one single-producer single-consumer
// ring of 32-bit immediates per source rank, plus a doorbell (a futex word) the receiver
// sleeps on when nothing arrives. It lives in a memfd mapping that every same-host peer
// maps; the owner is the only consumer, source s the only producer of ring s.
//
// Memory ordering (fabric/PROTOCOL.md, "Same host"): a sender stores a write's bytes into
// the peer's mapped region, then stores the immediate into the ring slot and publishes it
// with a release store of the ring's tail; the receiver reads the tail with an acquire load
// before it reads the slot, so every byte of the write happens-before the receiver counts
// its immediate. The head is published back with release and read with acquire, so a slot
// is never overwritten before it was read.
#pragma once

#if !defined(MOERL_INSIDE_moerl_fabric)
#error \
    "fabric/internal/host_inbox.h is private to moerl_fabric (fabric/): include its public headers"
#endif

#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include "common/error.h"

namespace moerl::fabric {

class host_inbox {
 public:
  // Virtual bytes of one inbox; pages are only backed once touched.
  static constexpr size_t bytes = size_t(16) << 20;

  // Creates this rank's inbox (a memfd of `bytes`).
  static result<host_inbox> create();
  // Maps a peer's inbox: the owner's address when it is this process, else its memfd through
  // /proc/<pid>/fd.
  static result<host_inbox> attach(int64_t pid, int64_t fd, uint64_t owner_addr, bool same_process);

  host_inbox() = default;
  host_inbox(host_inbox&& o) noexcept;
  host_inbox& operator=(host_inbox&& o) noexcept;
  ~host_inbox();

  int fd() const { return fd_; }
  uint64_t addr() const { return reinterpret_cast<uint64_t>(base_); }

  // Splits the inbox into num_ranks rings (owner and senders compute the same layout).
  void set_num_ranks(int num_ranks);
  // Producer side (source `src`): false when the ring is full (the caller retries).
  bool try_push(int src, uint32_t imm);
  // Rings the doorbell: wakes the owner if it sleeps.
  void ring();
  // Consumer side: appends every immediate published so far; true if any.
  bool drain(std::vector<uint32_t>& imms);
  // Consumer side: sleeps until the doorbell rings or max_ns pass (returns at once when a
  // ring holds immediates).
  void sleep(int64_t max_ns);

 private:
  char* base_ = nullptr;
  size_t size_ = 0;
  int fd_ = -1;
  bool owned_map_ = false;  // false: a same-process peer's inbox (not unmapped here)
  int num_ranks_ = 0;
  uint64_t capacity_ = 0;  // slots per ring, a power of two
  size_t ring_stride_ = 0;
  char* ring(int src) const;
  bool any_pending() const;
};

}  // namespace moerl::fabric
