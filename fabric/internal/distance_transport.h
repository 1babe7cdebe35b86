// A transport per distance behind the one transport interface: writes to a peer in this
// process are stores into its memory, writes to a peer on this host are stores into the
// peer's memfd mapping (senders copy once, straight into the receiver's region), and writes
// to a peer on another host go through the libfabric endpoint (efa, tcp; wrapped in the
// reorder shim when asked). Same-host immediates travel through the receiver's host_inbox;
// completion is still only by counting them (PROTOCOL.md, "Same host").
//
// A peer is on "this host" when it reports the same host id: the boot id plus the network
// and pid namespaces (a rank in another network namespace is a network peer), or the id a
// test sets in transport_options::host_id.
#pragma once

#if !defined(MOERL_INSIDE_moerl_fabric)
#error \
    "fabric/internal/distance_transport.h is private to moerl_fabric (fabric/): include its public headers"
#endif

#include <memory>
#include <string>
#include <vector>

#include "fabric/internal/host_inbox.h"
#include "fabric/transport.h"

namespace moerl::fabric {

class distance_transport final : public transport {
 public:
  static result<std::unique_ptr<transport>> open(const transport_options& options,
                                                 std::unique_ptr<transport> fabric);
  ~distance_transport() override;

  std::string address() const override;
  status set_peers(const std::vector<std::string>& addresses) override;
  result<local_region> register_memory(void* ptr, size_t size) override;
  status deregister_memory(const local_region& region) override {
    return fabric_->deregister_memory(region);
  }
  result<local_region> allocate_region(size_t size) override;
  result<local_region> allocate_host_region(size_t size) override;
  result<local_region> allocate_device_region(size_t size) override;
  result<local_region> register_device_memory(void* ptr, size_t size, int device) override {
    return fabric_->register_device_memory(ptr, size, device);
  }
  status write(int peer, const local_region& src_region, const void* src, size_t len,
               const remote_region& dst, uint64_t offset, uint32_t imm,
               int64_t deadline_ns) override;
  status progress(std::vector<uint32_t>& imms) override;
  size_t outstanding() const override { return fabric_->outstanding(); }
  const transport_description& describe() const override { return desc_; }
  peer_distance distance(int peer) const override { return peers_[peer].distance; }
  char* mapped(int peer, const remote_region& dst, uint64_t offset, size_t len) override;
  result<char*> device_mapped(int peer, const remote_region& dst, uint64_t offset,
                              size_t len) override;
  status notify(int peer, uint32_t imm, int64_t count, int64_t deadline_ns) override;
  void idle_wait(int64_t max_ns) override;

 private:
  distance_transport() = default;
  // A memfd mapping of `size` bytes, owned here (unmapped when the transport closes).
  result<char*> map_shared(size_t size, bool populate);
  // Where bytes [offset, offset+len) of a peer's device region are in this process's device
  // address space: the owner's pointer (same process), the region opened through its IPC
  // handle once (same host), or an error (a network peer: the fabric carries those).
  void close_device_mappings();
  // Unmaps the same-host peers' regions mapped so far (peers replaced, or the transport
  // closing): a peer's region freed by its owner stays alive while a mapping of it exists.
  void close_peer_mappings();
  result<char*> mapped_device(int peer, const remote_region& dst, uint64_t offset, size_t len);
  // write() into a device region of a same-process or same-host peer: one device copy, then
  // the immediate (the copy has completed when notify() publishes it).
  status write_device(int peer, const void* src, size_t len, const remote_region& dst,
                      uint64_t offset, uint32_t imm, int64_t deadline_ns);

  struct peer_mapping {
    int64_t fd;
    char* base;
    size_t size;
  };
  // A same-host peer's device region opened through its IPC handle (closed by
  // close_device_mappings, when the peers are replaced or the transport closes).
  struct device_mapping {
    unsigned char handle[64];
    uint64_t size;
    char* base;
  };
  struct peer {
    peer_distance distance = peer_distance::network;
    int64_t pid = 0;
    host_inbox inbox;                   // same process or same host: its inbox, mapped here
    std::vector<peer_mapping> regions;  // same host: its regions mapped so far
    std::vector<device_mapping> device_regions;  // same host: its device regions opened so far
  };
  struct owned_region {
    char* ptr;
    size_t size;
    int fd;
  };

  std::unique_ptr<transport> fabric_;
  std::string host_id_;
  std::shared_ptr<const std::atomic<bool>> abort_;  // transport_options::abort
  host_inbox inbox_;
  int my_index_ = -1;
  bool poll_fabric_ = false;  // a network peer, or a region written through the fabric
  std::vector<peer> peers_;
  std::vector<owned_region> owned_;
  std::vector<void*> owned_device_;  // allocate_device_region's allocations
  std::vector<uint32_t> pending_;    // drained while waiting for ring space
  transport_description desc_;
};

}  // namespace moerl::fabric
