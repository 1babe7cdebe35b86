#include "fabric/provider_info.h"

#include <algorithm>

#include <rdma/fabric.h>

namespace moerl::fabric {
namespace {

std::vector<std::string> order_names(uint64_t bits) {
  static const std::pair<uint64_t, const char*> kOrders[] = {
      {FI_ORDER_RAR, "RAR"}, {FI_ORDER_RAW, "RAW"}, {FI_ORDER_WAR, "WAR"},
      {FI_ORDER_WAW, "WAW"}, {FI_ORDER_SAR, "SAR"}, {FI_ORDER_SAW, "SAW"},
      {FI_ORDER_SAS, "SAS"}, {FI_ORDER_RAS, "RAS"}, {FI_ORDER_WAS, "WAS"}};
  std::vector<std::string> out;
  for (const auto& [bit, name] : kOrders)
    if (bits & bit) out.emplace_back(name);
  return out;
}

}  // namespace

std::string mr_mode_names(int mode) {
  static const std::pair<int, const char*> kModes[] = {{FI_MR_LOCAL, "LOCAL"},
                                                       {FI_MR_VIRT_ADDR, "VIRT_ADDR"},
                                                       {FI_MR_ALLOCATED, "ALLOCATED"},
                                                       {FI_MR_PROV_KEY, "PROV_KEY"},
                                                       {FI_MR_ENDPOINT, "ENDPOINT"},
                                                       {FI_MR_HMEM, "HMEM"},
                                                       {FI_MR_RAW, "RAW"},
                                                       {FI_MR_MMU_NOTIFY, "MMU_NOTIFY"},
                                                       {FI_MR_RMA_EVENT, "RMA_EVENT"},
                                                       {FI_MR_COLLECTIVE, "COLLECTIVE"}};
  std::string out;
  for (const auto& [bit, name] : kModes)
    if (mode & bit) out += (out.empty() ? "" : "|") + std::string(name);
  return out.empty() ? "none" : out;
}

std::string libfabric_runtime_version() {
  const uint32_t v = fi_version();
  return std::to_string(FI_MAJOR(v)) + "." + std::to_string(FI_MINOR(v));
}

namespace {

// One fi_getinfo query for RDM endpoints with `caps`; appends providers not yet listed.
status query_providers(uint64_t caps, std::vector<provider_info>& out) {
  fi_info* hints = fi_allocinfo();
  if (!hints) return error{errc::fabric_error, "fi_allocinfo returned null"};
  hints->ep_attr->type = FI_EP_RDM;
  hints->caps = caps;
  // Every MR mode moerl handles, so providers that need them are listed too.
  hints->domain_attr->mr_mode =
      FI_MR_LOCAL | FI_MR_VIRT_ADDR | FI_MR_ALLOCATED | FI_MR_PROV_KEY | FI_MR_ENDPOINT;
  hints->mode = FI_CONTEXT;
  fi_info* info = nullptr;
  const int rc = fi_getinfo(FI_VERSION(1, 17), nullptr, nullptr, 0, hints, &info);
  fi_freeinfo(hints);
  if (rc == -FI_ENODATA) return {};
  if (rc != 0) return error{errc::fabric_error, std::string("fi_getinfo: ") + fi_strerror(-rc)};
  for (fi_info* cur = info; cur; cur = cur->next) {
    const std::string name = cur->fabric_attr->prov_name ? cur->fabric_attr->prov_name : "?";
    const bool listed =
        std::any_of(out.begin(), out.end(), [&](const provider_info& p) { return p.name == name; });
    if (listed) continue;
    provider_info p;
    p.name = name;
    p.rma = (cur->caps & FI_RMA) != 0;
    p.msg = (cur->caps & FI_MSG) != 0;
    p.cq_data_size = cur->domain_attr->cq_data_size;
    p.msg_order = order_names(cur->tx_attr->msg_order);
    p.mr_mode = mr_mode_names(cur->domain_attr->mr_mode);
    out.push_back(p);
  }
  fi_freeinfo(info);
  return {};
}

}  // namespace

result<std::vector<provider_info>> list_rdm_providers() {
  std::vector<provider_info> out;
  // RMA-capable providers first (what the expert plane needs), then message-only ones.
  if (auto st = query_providers(FI_MSG | FI_RMA, out); !st) return st.err();
  if (auto st = query_providers(FI_MSG, out); !st) return st.err();
  return out;
}

}  // namespace moerl::fabric
