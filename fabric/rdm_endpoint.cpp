#include "fabric/rdm_endpoint.h"

#include <unistd.h>

#include <chrono>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <limits>
#include <mutex>
#include <sstream>
#include <string>

#include <rdma/fi_cm.h>
#include <rdma/fi_domain.h>
#include <rdma/fi_endpoint.h>
#include <rdma/fi_rma.h>

#include "common/config.h"
#include "common/log.h"
#include "common/shm_leftovers.h"
#include "common/status_try.h"
#include "fabric/internal/fi_check.h"
#include "fabric/provider_info.h"

namespace moerl::fabric {

int64_t now_ns() {
  return std::chrono::duration_cast<std::chrono::nanoseconds>(
             std::chrono::steady_clock::now().time_since_epoch())
      .count();
}

transport_options transport_options::from_config(const config& cfg) {
  transport_options o;
  o.provider = cfg.get_string("fabric.provider");
  o.require_provider = cfg.get_bool("fabric.require_provider");
  o.reorder_shim = cfg.get_bool("fabric.reorder_shim");
  o.paths = cfg.get_string("fabric.paths");
  if (const char* env = std::getenv("MOERL_FABRIC_PROVIDER"); env && *env) o.provider = env;
  return o;
}

namespace {

// Before this process's first endpoint, shm regions named after our own pid can only be
// leftovers of a dead process that had the pid (common/shm_leftovers.h): no live process but
// us holds it. Once per pid, not once per program image: a rank forked by launch_processes()
// inherits the parent's "done" state but has a pid of its own, whose leftovers it must still
// remove (seen: a forked rank failed fi_enable with EBUSY after its parent had cleaned up).
void remove_stale_shm_regions_of_this_pid() {
  static std::mutex mu;
  static pid_t cleaned_for = 0;
  std::lock_guard<std::mutex> lock(mu);
  if (cleaned_for == ::getpid()) return;
  cleaned_for = ::getpid();
  remove_shm_regions_of(::getpid(), "fabric");
}

// "tcp" names the RDM stack the tcp provider offers through ofi_rxm.
std::string canonical_provider(const std::string& name) {
  return name == "tcp" ? "tcp;ofi_rxm" : name;
}

// Which providers to try, in order. "auto" prefers EFA, then shared memory (all ranks of a
// dev box share a host), then TCP. A named provider is tried first; without
// require_provider the automatic order follows it so a missing provider is a fallback
// that is logged, never silent.
std::vector<std::string> candidates(const transport_options& o) {
  const std::vector<std::string> automatic = {"efa", "shm", "tcp;ofi_rxm"};
  if (o.provider == "auto" || o.provider.empty()) return automatic;
  std::vector<std::string> out = {canonical_provider(o.provider)};
  if (!o.require_provider)
    for (const auto& p : automatic)
      if (p != out.front()) out.push_back(p);
  return out;
}

// The interface of this host's IPv4 default route (the up one of lowest metric in
// /proc/net/route), or "" without one. A socket provider (tcp;ofi_rxm) offers an entry per
// interface address, the fastest link first: a veth another process has just made (10 Gb/s;
// sims/netns_link leaves its host end in the root namespace, and its availability probe makes
// one for a moment) comes before eth0 (speed unknown). An endpoint that took it lost its
// address when that process deleted the veth: its next lazy connect failed in fi_writemsg
// ("Cannot assign requested address": bind to an address no longer local), and peers' writes
// to it went nowhere until the op deadline. The default route's interface is the one that
// reaches other hosts, and it outlives any test's interfaces.
std::string default_route_interface() {
  std::ifstream in("/proc/net/route");
  std::string line, best;
  unsigned long best_metric = std::numeric_limits<unsigned long>::max();
  std::getline(in, line);  // the header
  while (std::getline(in, line)) {
    std::istringstream f(line);
    std::string iface, dest, gateway, mask;
    unsigned long flags = 0, refcnt = 0, use = 0, metric = 0;
    if (!(f >> iface >> dest >> gateway >> std::hex >> flags >> std::dec >> refcnt >> use >>
          metric >> mask))
      continue;
    constexpr unsigned long rtf_up = 0x1;
    if (dest != "00000000" || mask != "00000000" || !(flags & rtf_up)) continue;
    if (metric < best_metric) {
      best = iface;
      best_metric = metric;
    }
  }
  return best;
}

// fi_getinfo for one provider with what the expert plane needs (and FI_HMEM: device memory
// registration, when `hmem`). Null when absent. Among the provider's entries that carry our
// 4-byte immediates: the IPv4 one on the default route's interface when there is one (see
// default_route_interface(); FI_TCP_IFACE, which libfabric honours, narrows the entries
// first), else libfabric's first.
result<fi_info*> query(const std::string& provider, bool hmem) {
  fi_info* hints = fi_allocinfo();
  if (!hints) return error{errc::fabric_error, "fi_allocinfo returned null"};
  hints->ep_attr->type = FI_EP_RDM;
  hints->caps = FI_MSG | FI_RMA | FI_WRITE | FI_REMOTE_WRITE | (hmem ? FI_HMEM : 0);
  hints->mode = FI_CONTEXT | FI_CONTEXT2;
  // Every registration mode we handle; the provider clears the ones it does not need.
  hints->domain_attr->mr_mode = FI_MR_LOCAL | FI_MR_VIRT_ADDR | FI_MR_ALLOCATED | FI_MR_PROV_KEY |
                                FI_MR_ENDPOINT | (hmem ? FI_MR_HMEM : 0);
  hints->domain_attr->threading = FI_THREAD_DOMAIN;
  hints->fabric_attr->prov_name = strdup(provider.c_str());
  fi_info* info = nullptr;
  const int rc = fi_getinfo(FI_VERSION(1, 17), nullptr, nullptr, 0, hints, &info);
  fi_freeinfo(hints);
  if (rc == -FI_ENODATA) return static_cast<fi_info*>(nullptr);
  if (rc != 0) return detail::fi_call_error("fi_getinfo", rc, __FILE__, __LINE__);
  const std::string route_iface = default_route_interface();
  fi_info* pick = nullptr;
  for (fi_info* cur = info; cur; cur = cur->next) {
    if (cur->domain_attr->cq_data_size < 4) continue;
    if (!pick) pick = cur;
    if (!route_iface.empty() && cur->addr_format == FI_SOCKADDR_IN && cur->domain_attr->name &&
        route_iface == cur->domain_attr->name) {
      pick = cur;
      break;
    }
  }
  if (!pick) {
    fi_freeinfo(info);
    return static_cast<fi_info*>(nullptr);
  }
  fi_info* chosen = fi_dupinfo(pick);
  fi_freeinfo(info);
  if (!chosen) return error{errc::fabric_error, "fi_dupinfo returned null"};
  return chosen;
}

}  // namespace

result<std::unique_ptr<rdm_endpoint>> rdm_endpoint::open(const transport_options& options) {
  std::string tried;
  for (const auto& name : candidates(options)) {
    // With hmem, an endpoint that registers device memory where the provider offers one.
    fi_info* info = nullptr;
    if (options.hmem) {
      ASSIGN_OR_RETURN(info, query(name, true));
    }
    if (!info) {
      ASSIGN_OR_RETURN(info, query(name, false));
    }
    if (!info) {
      tried += (tried.empty() ? "" : ", ") + name;
      continue;
    }
    if (name != canonical_provider(options.provider) && options.provider != "auto")
      logger("fabric")->warn("provider '{}' unavailable; falling back to '{}'", options.provider,
                             name);
    std::unique_ptr<rdm_endpoint> ep(new rdm_endpoint());
    ep->abort_ = options.abort;
    if (auto st = ep->open_on(info); !st) return st.err();
    return ep;
  }
  return error{errc::provider_unavailable,
               "no libfabric provider with RDM + RMA + 4-byte remote CQ data among: " + tried};
}

status rdm_endpoint::open_on(fi_info* info) {
  info_ = info;
  if (info_->fabric_attr->prov_name && std::strcmp(info_->fabric_attr->prov_name, "shm") == 0)
    remove_stale_shm_regions_of_this_pid();
  FI_CHECK(fi_fabric(info_->fabric_attr, &fabric_, nullptr));
  FI_CHECK(fi_domain(fabric_, info_, &domain_, nullptr));
  fi_cq_attr cq_attr{};
  cq_attr.format = FI_CQ_FORMAT_DATA;
  cq_attr.wait_obj = FI_WAIT_NONE;
  cq_attr.size = 16384;
  FI_CHECK(fi_cq_open(domain_, &cq_attr, &cq_, nullptr));
  fi_av_attr av_attr{};
  av_attr.type = FI_AV_TABLE;
  FI_CHECK(fi_av_open(domain_, &av_attr, &av_, nullptr));
  FI_CHECK(fi_endpoint(domain_, info_, &ep_, nullptr));
  FI_CHECK(fi_ep_bind(ep_, &cq_->fid, FI_TRANSMIT | FI_RECV));
  FI_CHECK(fi_ep_bind(ep_, &av_->fid, 0));
  FI_CHECK(fi_enable(ep_));
  char name[256];
  size_t len = sizeof(name);
  FI_CHECK(fi_getname(&ep_->fid, name, &len));
  address_.assign(name, len);

  description_.provider = info_->fabric_attr->prov_name ? info_->fabric_attr->prov_name : "?";
  description_.fabric = info_->fabric_attr->name ? info_->fabric_attr->name : "?";
  description_.domain = info_->domain_attr->name ? info_->domain_attr->name : "?";
  description_.libfabric_version = libfabric_runtime_version();
  description_.provider_version = info_->fabric_attr->prov_version;
  description_.cq_data_size = info_->domain_attr->cq_data_size;
  description_.mr_mode = mr_mode_names(info_->domain_attr->mr_mode);
  description_.hmem = (info_->caps & FI_HMEM) != 0;
  return {};
}

rdm_endpoint::~rdm_endpoint() {
  // Close in reverse order of opening; errors here have nobody left to report to.
  for (auto* mr : mrs_) fi_close(&mr->fid);
  if (ep_) fi_close(&ep_->fid);
  if (av_) fi_close(&av_->fid);
  if (cq_) fi_close(&cq_->fid);
  if (domain_) fi_close(&domain_->fid);
  if (fabric_) fi_close(&fabric_->fid);
  if (info_) fi_freeinfo(info_);
}

status rdm_endpoint::set_peers(const std::vector<std::string>& addresses) {
  peers_.assign(addresses.size(), FI_ADDR_UNSPEC);
  for (size_t i = 0; i < addresses.size(); ++i) {
    const int n = fi_av_insert(av_, addresses[i].data(), 1, &peers_[i], 0, nullptr);
    if (n != 1) {
      return error{errc::fabric_error, "fi_av_insert of peer " + std::to_string(i) + " inserted " +
                                           std::to_string(n) + " addresses"};
    }
  }
  return {};
}

result<local_region> rdm_endpoint::register_memory(void* ptr, size_t size) {
  return register_region(ptr, size, -1);
}

status rdm_endpoint::deregister_memory(const local_region& region) {
  for (auto it = mrs_.begin(); it != mrs_.end(); ++it) {
    if (fi_mr_key(*it) != region.remote.key) continue;
    fid_mr* mr = *it;
    mrs_.erase(it);
    FI_CHECK(fi_close(&mr->fid));
    return {};
  }
  return error{errc::not_found, "deregister_memory: no region with key " +
                                    std::to_string(region.remote.key) + " is registered here"};
}

result<local_region> rdm_endpoint::register_device_memory(void* ptr, size_t size, int device) {
  if (!description_.hmem)
    return error{errc::invalid_argument,
                 "provider '" + description_.provider +
                     "' does not register device memory (it reported no FI_HMEM): device "
                     "regions reach network peers through host staging"};
  if (device < 0) return error{errc::invalid_argument, "register_device_memory without a device"};
  return register_region(ptr, size, device);
}

result<local_region> rdm_endpoint::register_region(void* ptr, size_t size, int cuda_device) {
  if (!ptr || size == 0) return error{errc::invalid_argument, "register_memory of an empty range"};
  const int mode = info_->domain_attr->mr_mode;
  fid_mr* mr = nullptr;
  // Without FI_MR_PROV_KEY the caller picks keys; each region gets its own.
  const uint64_t requested_key = (mode & FI_MR_PROV_KEY) ? 0 : next_key_++;
  const uint64_t access = FI_READ | FI_WRITE | FI_REMOTE_READ | FI_REMOTE_WRITE;
  if (cuda_device < 0) {
    FI_CHECK(fi_mr_reg(domain_, ptr, size, access, 0, requested_key, 0, &mr, nullptr));
  } else {
    // Device memory: the provider learns the interface and device from the attributes
    // (fi_mr_regattr; FI_HMEM_CUDA), and reaches the bytes through GPUDirect RDMA (efa).
    iovec iov{ptr, size};
    fi_mr_attr attr{};
    attr.mr_iov = &iov;
    attr.iov_count = 1;
    attr.access = access;
    attr.requested_key = requested_key;
    attr.iface = FI_HMEM_CUDA;
    attr.device.cuda = cuda_device;
    FI_CHECK(fi_mr_regattr(domain_, &attr, 0, &mr));
  }
  mrs_.push_back(mr);
  if (mode & FI_MR_ENDPOINT) {
    FI_CHECK(fi_mr_bind(mr, &ep_->fid, 0));
    FI_CHECK(fi_mr_enable(mr));
  }
  local_region r;
  r.ptr = ptr;
  r.size = size;
  r.desc = (mode & FI_MR_LOCAL) ? fi_mr_desc(mr) : nullptr;
  r.remote.key = fi_mr_key(mr);
  if (r.remote.key == FI_KEY_NOTAVAIL)
    return error{errc::fabric_error, "fi_mr_key: key not available (raw keys unsupported)"};
  r.remote.base = (mode & FI_MR_VIRT_ADDR) ? reinterpret_cast<uint64_t>(ptr) : 0;
  r.remote.size = size;
  return r;
}

rdm_endpoint::op_context* rdm_endpoint::acquire_context() {
  if (free_contexts_.empty()) {
    contexts_.emplace_back();
    return &contexts_.back();
  }
  op_context* c = free_contexts_.back();
  free_contexts_.pop_back();
  return c;
}

status rdm_endpoint::post_write(int peer, const local_region& src_region, const void* src,
                                size_t len, const remote_region& dst, uint64_t offset,
                                bool with_imm, uint32_t imm, uint64_t id, int64_t deadline_ns) {
  if (peer < 0 || static_cast<size_t>(peer) >= peers_.size())
    return error{errc::invalid_argument, "write to unknown peer " + std::to_string(peer)};
  const auto* s = static_cast<const char*>(src);
  const auto* base = static_cast<const char*>(src_region.ptr);
  if (s < base || s + len > base + src_region.size)
    return error{errc::invalid_argument, "write source outside its registered region"};
  if (offset + len > dst.size)
    return error{errc::invalid_argument, "write of " + std::to_string(len) + " bytes at offset " +
                                             std::to_string(offset) + " overruns peer " +
                                             std::to_string(peer) + "'s region of " +
                                             std::to_string(dst.size) + " bytes"};
  op_context* c = acquire_context();
  c->id = id;
  c->peer = peer;
  iovec iov{const_cast<char*>(s), len};
  void* desc = src_region.desc;
  fi_rma_iov rma{dst.base + offset, len, dst.key};
  fi_msg_rma msg{};
  msg.msg_iov = &iov;
  msg.desc = &desc;
  msg.iov_count = 1;
  msg.addr = peers_[peer];
  msg.rma_iov = &rma;
  msg.rma_iov_count = 1;
  msg.context = &c->ctx;
  msg.data = imm;
  const uint64_t flags = FI_COMPLETION | (with_imm ? FI_REMOTE_CQ_DATA : 0);
  for (;;) {
    const ssize_t rc = fi_writemsg(ep_, &msg, flags);
    if (rc == 0) break;
    if (rc != -FI_EAGAIN) {
      free_contexts_.push_back(c);
      FI_CHECK(rc);
    }
    // The provider's queue is full: drain completions (keeping them for the caller) and retry.
    if (auto st = poll(stashed_imms_, &stashed_done_); !st) {
      free_contexts_.push_back(c);
      return st;
    }
    if (now_ns() > deadline_ns) {
      free_contexts_.push_back(c);
      return error{errc::timeout, "fi_writemsg to peer " + std::to_string(peer) +
                                      " kept returning FI_EAGAIN until the deadline"};
    }
    if (abort_ && abort_->load(std::memory_order_acquire)) {
      free_contexts_.push_back(c);
      return error{errc::peer_dead, "fi_writemsg to peer " + std::to_string(peer) +
                                        " refused (FI_EAGAIN), then aborted (a member of the "
                                        "group was lost)"};
    }
  }
  ++outstanding_;
  return {};
}

status rdm_endpoint::write(int peer, const local_region& src_region, const void* src, size_t len,
                           const remote_region& dst, uint64_t offset, uint32_t imm,
                           int64_t deadline_ns) {
  return post_write(peer, src_region, src, len, dst, offset, true, imm, 0, deadline_ns);
}

status rdm_endpoint::poll(std::vector<uint32_t>& imms, std::vector<uint64_t>* done) {
  if (&imms != &stashed_imms_ && !stashed_imms_.empty()) {
    imms.insert(imms.end(), stashed_imms_.begin(), stashed_imms_.end());
    stashed_imms_.clear();
  }
  if (done && done != &stashed_done_ && !stashed_done_.empty()) {
    done->insert(done->end(), stashed_done_.begin(), stashed_done_.end());
    stashed_done_.clear();
  }
  if (!done) stashed_done_.clear();  // nobody asks for ids: only the count matters
  fi_cq_data_entry entries[64];
  for (;;) {
    const ssize_t n = fi_cq_read(cq_, entries, 64);
    if (n == -FI_EAGAIN) return {};
    if (n == -FI_EAVAIL) {
      fi_cq_err_entry err{};
      FI_CHECK(fi_cq_readerr(cq_, &err, 0));
      int peer = -1;
      if (err.op_context) {
        auto* c = reinterpret_cast<op_context*>(err.op_context);
        peer = c->peer;
        free_contexts_.push_back(c);
        --outstanding_;
      }
      const char* why = fi_cq_strerror(cq_, err.prov_errno, err.err_data, nullptr, 0);
      return error{peer >= 0 ? errc::peer_dead : errc::fabric_error,
                   "write completion failed" +
                       (peer >= 0 ? " for peer " + std::to_string(peer) : std::string()) + ": " +
                       fi_strerror(err.err) + " (" + (why ? why : "") + ")"};
    }
    FI_CHECK(n);
    for (ssize_t i = 0; i < n; ++i) {
      const fi_cq_data_entry& e = entries[i];
      if (e.flags & FI_REMOTE_CQ_DATA) {
        imms.push_back(static_cast<uint32_t>(e.data));
        continue;
      }
      if (e.op_context) {
        auto* c = reinterpret_cast<op_context*>(e.op_context);
        if (done) done->push_back(c->id);
        free_contexts_.push_back(c);
        --outstanding_;
      }
    }
  }
}

status rdm_endpoint::progress(std::vector<uint32_t>& imms) { return poll(imms, nullptr); }

}  // namespace moerl::fabric
