#include "fabric/transport.h"

#include <sched.h>
#include <sys/mman.h>

#include "common/status_try.h"
#include "fabric/internal/distance_transport.h"
#include "fabric/internal/reorder_shim.h"
#include "fabric/rdm_endpoint.h"

namespace moerl::fabric {

const char* peer_distance_name(peer_distance d) {
  switch (d) {
    case peer_distance::same_process: return "same_process";
    case peer_distance::same_host: return "same_host";
    case peer_distance::network: return "network";
  }
  return "?";
}

transport::~transport() {
  for (const mapping& m : owned_) ::munmap(m.ptr, m.size);
}

result<local_region> transport::allocate_region(size_t size) {
  void* p = ::mmap(nullptr, size, PROT_READ | PROT_WRITE,
                   MAP_PRIVATE | MAP_ANONYMOUS | MAP_POPULATE, -1, 0);
  if (p == MAP_FAILED)
    return error{errc::capacity_exceeded, "cannot map " + std::to_string(size) + " bytes"};
  owned_.push_back({p, size});
  return register_memory(p, size);
}

result<local_region> transport::allocate_host_region(size_t) { return local_region{}; }

status transport::deregister_memory(const local_region&) {
  return error{errc::invalid_argument,
               "provider '" + describe().provider + "' has no deregistration here"};
}

result<local_region> transport::allocate_device_region(size_t) {
  return error{errc::invalid_argument,
               "device regions need the transport per distance (fabric.paths auto), not '" +
                   describe().provider + "' alone"};
}

result<local_region> transport::register_device_memory(void*, size_t, int) {
  return error{errc::invalid_argument, "provider '" + describe().provider +
                                           "' does not register device memory (no FI_HMEM)"};
}

status transport::notify(int peer, uint32_t, int64_t, int64_t) {
  return error{errc::invalid_argument,
               "notify to peer " + std::to_string(peer) + ": no mapped path to it"};
}

void transport::idle_wait(int64_t) { sched_yield(); }

result<std::unique_ptr<transport>> open_fabric_transport(const transport_options& options) {
  ASSIGN_OR_RETURN(auto ep, rdm_endpoint::open(options));
  if (options.reorder_shim)
    return std::unique_ptr<transport>(new reorder_shim(std::move(ep), options.shim_seed));
  return std::unique_ptr<transport>(std::move(ep));
}

result<std::unique_ptr<transport>> open_transport(const transport_options& options) {
  if (options.paths != "auto" && options.paths != "fabric")
    return error{errc::invalid_argument,
                 "fabric.paths must be auto or fabric, not '" + options.paths + "'"};
  ASSIGN_OR_RETURN(auto fab, open_fabric_transport(options));
  if (options.paths == "fabric") return fab;
  return distance_transport::open(options, std::move(fab));
}

result<transport_description> probe_transport(const transport_options& options) {
  ASSIGN_OR_RETURN(auto t, open_transport(options));
  return t->describe();
}

}  // namespace moerl::fabric
