// libfabric's exported entry points that moerl calls, opening libfabric.so at the first one
// (common/on_demand_library.h says why). Everything else in libfabric's API is an inline
// function over the ops tables of objects these return, so these six are the whole link
// surface; a new call into libfabric that is not inline shows as an undefined symbol at link
// time and belongs here. Without the library: fi_getinfo and fi_fabric fail with -FI_ENOSYS,
// fi_version is 0, and the first failure is logged with dlerror's text.
#include <rdma/fabric.h>
#include <rdma/fi_errno.h>

#include "common/on_demand_library.h"

namespace {

moerl::on_demand_library& libfabric() {
  static moerl::on_demand_library lib({"libfabric.so.1"}, "the fabric (libfabric)");
  return lib;
}

template <class F>
F* entry(const char* name) {
  return moerl::on_demand_symbol<F>(libfabric(), name);
}

}  // namespace

extern "C" {

uint32_t fi_version(void) {
  static auto* f = entry<decltype(fi_version)>("fi_version");
  return f ? f() : 0;
}

int fi_getinfo(uint32_t version, const char* node, const char* service, uint64_t flags,
               const struct fi_info* hints, struct fi_info** info) {
  static auto* f = entry<decltype(fi_getinfo)>("fi_getinfo");
  return f ? f(version, node, service, flags, hints, info) : -FI_ENOSYS;
}

void fi_freeinfo(struct fi_info* info) {
  static auto* f = entry<decltype(fi_freeinfo)>("fi_freeinfo");
  if (f) f(info);  // without the library nothing was allocated by it
}

struct fi_info* fi_dupinfo(const struct fi_info* info) {
  static auto* f = entry<decltype(fi_dupinfo)>("fi_dupinfo");
  return f ? f(info) : nullptr;
}

int fi_fabric(struct fi_fabric_attr* attr, struct fid_fabric** fabric, void* context) {
  static auto* f = entry<decltype(fi_fabric)>("fi_fabric");
  return f ? f(attr, fabric, context) : -FI_ENOSYS;
}

const char* fi_strerror(int errnum) {
  static auto* f = entry<decltype(fi_strerror)>("fi_strerror");
  if (f) return f(errnum);
  static const std::string why = "libfabric unavailable: " + libfabric().load_error();
  return why.c_str();
}

}  // extern "C"
