// The expert plane's transport: one libfabric RDM endpoint per rank that writes into
// peers' registered memory with 32-bit immediate data, and reports the immediates it
// receives. Everything above it (EP group, collectives) completes operations only by
// counting those immediates: no ordering of writes is assumed (see PROTOCOL.md).
//
// Threading: a transport is used by one thread at a time (the rank's EP thread).
#pragma once

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
};

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

  // fabric.provider, fabric.require_provider, fabric.reorder_shim; MOERL_FABRIC_PROVIDER
  // overrides fabric.provider.
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
};

// A table of operations, so the reorder shim can stand between the EP layer and the endpoint.
class transport {
 public:
  virtual ~transport() = default;

  // Our address, to be exchanged through a bootstrap.
  virtual std::string address() const = 0;
  // Installs peers' addresses; peer i of later calls is addresses[i].
  virtual status set_peers(const std::vector<std::string>& addresses) = 0;
  // Registers [ptr, ptr+size) for local use and remote writes. The memory must outlive
  // the transport.
  virtual result<local_region> register_memory(void* ptr, size_t size) = 0;

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
};

// Opens an endpoint on the provider chosen by `options` (preference efa > shm > tcp;ofi_rxm
// for "auto"), wrapped in the reorder shim when asked.
result<std::unique_ptr<transport>> open_transport(const transport_options& options);

// Which provider `options` selects on this host and what it reports, by opening (and
// closing) an endpoint: what a node puts in its provenance for the expert plane.
result<transport_description> probe_transport(const transport_options& options);

// steady-clock nanoseconds, the time base of every deadline in fabric/.
int64_t now_ns();

}  // namespace moerl::fabric
