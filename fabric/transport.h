// The expert plane's transport: writes into peers' registered memory with 32-bit immediate
// data, and reports the immediates it receives. Everything above it (EP group, collectives)
// completes operations only by counting those immediates: no ordering of writes is assumed
// (see PROTOCOL.md). One interface, one transport per distance
// (fabric/internal/distance_transport.h): peers in this process are written directly, peers on this
// host through shared-memory mappings, peers on other hosts through a libfabric RDM endpoint (efa,
// tcp).
//
// Threading: a transport is used by one thread at a time (the rank's EP thread).
#pragma once

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "common/error.h"

namespace moerl {
class config;
}

namespace moerl::fabric {

// What a peer needs to write into one of our registered regions.
struct remote_region {
  uint64_t base = 0;  // address to use for byte 0 of the region (VA or 0 when offset-based)
  uint64_t key = 0;   // remote protection key
  uint64_t size = 0;  // bytes
  // Same-host peers (fabric/internal/distance_transport.h): the owner's address of byte 0 and its
  // memfd, which a peer on this host maps; host_fd -1: the region is not shared (written
  // through the fabric only).
  uint64_t host_addr = 0;
  int64_t host_fd = -1;
  // Device memory (fabric/DEVICE_MEMORY.md): memory is a memory_kind (0 host, 1 cuda); for
  // cuda host_addr is the owner's device pointer, ipc_handle the cudaIpcMemHandle_t a
  // same-host peer opens, and fabric_registered says whether network peers can write it
  // (the provider registered it with FI_HMEM); host_fd is -1 for device regions.
  uint8_t memory = 0;
  uint8_t fabric_registered = 1;
  int16_t device = -1;
  unsigned char ipc_handle[64] = {};
};

// How far a peer is, which decides the transport that carries its writes.
enum class peer_distance { same_process, same_host, network };
const char* peer_distance_name(peer_distance d);  // "same_process", "same_host", "network"

// A locally registered region. Owned by the transport that registered it.
struct local_region {
  void* ptr = nullptr;
  size_t size = 0;
  void* desc = nullptr;  // fi_mr_desc; non-null only when the provider wants FI_MR_LOCAL
  remote_region remote;  // what peers must be told
};

struct transport_options {
  std::string provider = "auto";  // auto|efa|shm|tcp;ofi_rxm|tcp
  bool require_provider = false;  // fail instead of falling back when `provider` is absent
  bool reorder_shim = false;      // wrap writes in the reorder/delay/split/re-deliver shim
  uint64_t shim_seed = 1;         // the shim's random sequence (reproducible failures)
  // auto: a transport per distance (same process, same host, network); fabric: every peer
  // through the libfabric endpoint, as on a fabric (what the reorder shim tests).
  std::string paths = "auto";
  // Which host this rank says it is on; "" is this host's identity (boot id, network and pid
  // namespaces). Tests give ranks of one box different ids to build a mix of distances.
  std::string host_id;
  // Ask the provider for FI_HMEM (device memory registration), falling back to an endpoint
  // without it: transport::allocate_device_region then registers device memory for network
  // peers where the provider can (efa), and leaves it to host staging where it cannot (tcp).
  bool hmem = false;
  // Set from another thread to end every wait of the groups built on this transport at once
  // (peer_dead, "aborted"): a group spanning processes whose member was lost, where waiting
  // for the dead member's writes until op_timeout would only delay the group's re-formation.
  // Null: waits end at their deadline only.
  std::shared_ptr<const std::atomic<bool>> abort;

  // fabric.provider, fabric.require_provider, fabric.reorder_shim, fabric.paths;
  // MOERL_FABRIC_PROVIDER overrides fabric.provider.
  static transport_options from_config(const config& cfg);
};

// The chosen provider and what it reported, for provenance and benchmark output.
struct transport_description {
  std::string provider;  // fabric_attr->prov_name, e.g. "tcp;ofi_rxm"
  std::string fabric;    // fabric_attr->name
  std::string domain;    // domain_attr->name
  std::string libfabric_version;
  uint32_t provider_version = 0;
  size_t cq_data_size = 0;
  std::string mr_mode;
  bool reorder_shim = false;
  // Per peer (index = peer): "same_process", "same_host" or "network" (distance_transport;
  // empty for a bare endpoint, where every peer is "network").
  std::vector<std::string> peer_paths;
  // Whether the endpoint registers device memory (the provider reported FI_HMEM).
  bool hmem = false;
  // Per peer: how its writes into our device regions travel (distance_transport, CUDA
  // builds): "cuda_same_process" (a device copy), "cuda_ipc" (a device copy into the region
  // opened through its IPC handle), "fi_hmem" (the fabric writes device memory), or
  // "host_staging" (the provider cannot: device bytes go through host memory). Empty where
  // the build has no CUDA.
  std::vector<std::string> peer_device_paths;
};

// A table of operations, so the reorder shim can stand between the EP layer and the endpoint.
class transport {
 public:
  // Our address, to be exchanged through a bootstrap.
  virtual std::string address() const = 0;
  // Installs peers' addresses; peer i of later calls is addresses[i].
  virtual status set_peers(const std::vector<std::string>& addresses) = 0;
  // Registers [ptr, ptr+size) for local use and remote writes. The memory must outlive
  // the transport. Same-host peers write such a region through the fabric.
  virtual result<local_region> register_memory(void* ptr, size_t size) = 0;
  // Ends a registration made by register_memory (the region as it returned it): peers'
  // writes into it fail at the writer from then on, so the memory may be freed or reused.
  // For regions that live shorter than the transport (the weight plane's landing regions,
  // weights/PROTOCOL.md "Fabric puts"); the expert plane's regions live as long as it.
  // errc::not_found when the region is not registered here; the default: an error.
  virtual status deregister_memory(const local_region& region);
  // A zeroed region of `size` bytes owned by the transport, registered, and shared with
  // same-host peers where the transport has them. Unmapped when the transport is destroyed,
  // so a late write from a peer of an old group faults at the writer instead of landing in
  // reused memory. The default: a private anonymous mapping, registered.
  virtual result<local_region> allocate_region(size_t size);
  // A zeroed region that only same-host peers store into (through mapped()): shared with
  // them, not registered with the fabric, its pages backed when first touched (so it can be
  // sized for a worst case that is never reached). A region with ptr == nullptr where the
  // transport shares no memory with peers (the default).
  virtual result<local_region> allocate_host_region(size_t size);
  // A zeroed region of `size` bytes in device memory (fabric/DEVICE_MEMORY.md), owned by the
  // transport (freed when it is destroyed): same-host peers write it through its CUDA IPC
  // handle, network peers through the fabric where the provider registered it (FI_HMEM;
  // remote.fabric_registered). mapped() never returns it: CPU stores cannot reach it, write()
  // copies. The default: an error (only distance_transport has device memory).
  virtual result<local_region> allocate_device_region(size_t size);
  // Registers device memory [ptr, ptr+size) on `device` with the fabric (FI_HMEM_CUDA): an
  // error where the provider did not report FI_HMEM (the default).
  virtual result<local_region> register_device_memory(void* ptr, size_t size, int device);

  // Which transport carries writes to `peer` (valid after set_peers).
  virtual peer_distance distance(int /*peer*/) const { return peer_distance::network; }
  // Where bytes [offset, offset+len) of peer's region `dst` are mapped in this process, or
  // nullptr (a network peer, or a region not shared). Bytes stored there are announced with
  // notify(), which orders them before the immediate (PROTOCOL.md, "Same host").
  virtual char* mapped(int /*peer*/, const remote_region& /*dst*/, uint64_t /*offset*/,
                       size_t /*len*/) {
    return nullptr;
  }
  // The device twin of mapped(): where bytes [offset, offset+len) of a same-process or
  // same-host peer's DEVICE region are addressable by this process's device copies and
  // kernels (the owner's pointer, or the region opened once through its CUDA IPC handle), so a
  // sender can fill it with one batched copy and then notify(). nullptr for a network peer or a
  // host region; an error when the IPC handle cannot be opened. The default: nullptr.
  virtual result<char*> device_mapped(int /*peer*/, const remote_region& /*dst*/,
                                      uint64_t /*offset*/, size_t /*len*/) {
    return static_cast<char*>(nullptr);
  }
  // Delivers `count` copies of `imm` to peer for bytes already stored through mapped(), and
  // wakes the peer once (not once per immediate: a receiver woken for each of a burst of
  // immediates runs, finds its step incomplete and sleeps again, which on a box with more
  // ranks than cores costs a context switch per immediate).
  virtual status notify(int peer, uint32_t imm, int64_t count, int64_t deadline_ns);
  // Nothing arrived: give the CPU away for at most max_ns (a doorbell where the transport has
  // one, so peers that outnumber cores are not starved by polling).
  virtual void idle_wait(int64_t max_ns);

  // Posts a write of [src, src+len) (inside `src_region`) to peer's region at `offset`.
  // The peer sees `imm` as one completion once all bytes are placed. Never blocks for
  // long: returns errc::timeout if the provider keeps refusing past `deadline_ns`
  // (steady clock), and errc::invalid_argument for out-of-region writes.
  virtual status write(int peer, const local_region& src_region, const void* src, size_t len,
                       const remote_region& dst, uint64_t offset, uint32_t imm,
                       int64_t deadline_ns) = 0;

  // Makes progress; appends every immediate received since the last call to `imms`.
  // A failed write (e.g. to a dead peer) is returned as an error naming the peer.
  virtual status progress(std::vector<uint32_t>& imms) = 0;

  // Writes posted whose local completion has not been seen yet.
  virtual size_t outstanding() const = 0;

  virtual const transport_description& describe() const = 0;

 private:
  // allocate_region's default mappings, unmapped after the derived transport closed.
  struct mapping {
    void* ptr;
    size_t size;
  };
  std::vector<mapping> owned_;

 public:
  transport() = default;
  transport(const transport&) = delete;
  transport& operator=(const transport&) = delete;
  // Unmaps the default allocate_region's mappings (derived transports closed theirs first).
  virtual ~transport();
};

// Opens an endpoint on the provider chosen by `options` (preference efa > shm > tcp;ofi_rxm
// for "auto"), wrapped in the reorder shim when asked; with paths "auto" behind a
// distance_transport that carries same-process and same-host peers itself.
result<std::unique_ptr<transport>> open_transport(const transport_options& options);

// The libfabric endpoint alone (wrapped in the reorder shim when asked), whatever `paths`.
result<std::unique_ptr<transport>> open_fabric_transport(const transport_options& options);

// Which provider `options` selects on this host and what it reports, by opening (and
// closing) an endpoint: what a node puts in its provenance for the expert plane.
result<transport_description> probe_transport(const transport_options& options);

// steady-clock nanoseconds, the time base of every deadline in fabric/.
int64_t now_ns();

}  // namespace moerl::fabric
