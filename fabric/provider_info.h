// What libfabric offers on this host: one entry per provider that can open an RDM
// endpoint. Used by provenance (`moerl version --json`) and provider selection.
#pragma once

#include <cstddef>
#include <string>
#include <vector>

#include "common/error.h"

namespace moerl::fabric {

struct provider_info {
  std::string name;                    // e.g. "shm", "tcp;ofi_rxm", "efa"
  bool rma = false;                    // FI_RMA capability with remote writes
  bool msg = false;                    // FI_MSG capability
  size_t cq_data_size = 0;             // bytes of remote CQ data (immediate) a write can carry
  std::vector<std::string> msg_order;  // FI_ORDER_* bits the provider reports, e.g. "RAW"
  std::string mr_mode;  // memory-registration mode bits, e.g. "LOCAL|VIRT_ADDR|PROV_KEY"
};

// Memory-registration mode bits as text, e.g. "LOCAL|VIRT_ADDR|PROV_KEY" ("none" for 0).
std::string mr_mode_names(int mode);

// libfabric's runtime version, e.g. "1.17.0".
std::string libfabric_runtime_version();

// Providers offering FI_EP_RDM, deduplicated by name, in libfabric's preference order.
result<std::vector<provider_info>> list_rdm_providers();

}  // namespace moerl::fabric
