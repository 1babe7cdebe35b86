#include "fabric/transport.h"

#include "fabric/reorder_shim.h"
#include "fabric/rdm_endpoint.h"

namespace moerl::fabric {

result<std::unique_ptr<transport>> open_transport(const transport_options& options) {
  auto ep = rdm_endpoint::open(options);
  if (!ep) return ep.err();
  if (options.reorder_shim)
    return std::unique_ptr<transport>(new reorder_shim(std::move(*ep), options.shim_seed));
  return std::unique_ptr<transport>(std::move(*ep));
}

}  // namespace moerl::fabric
