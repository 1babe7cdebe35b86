#include "fabric/transport.h"

#include "fabric/rdm_endpoint.h"
#include "fabric/reorder_shim.h"

namespace moerl::fabric {

result<std::unique_ptr<transport>> open_transport(const transport_options& options) {
  auto ep = rdm_endpoint::open(options);
  if (!ep) return ep.err();
  if (options.reorder_shim)
    return std::unique_ptr<transport>(new reorder_shim(std::move(*ep), options.shim_seed));
  return std::unique_ptr<transport>(std::move(*ep));
}

result<transport_description> probe_transport(const transport_options& options) {
  auto t = open_transport(options);
  if (!t) return t.err();
  return (*t)->describe();
}

}  // namespace moerl::fabric
