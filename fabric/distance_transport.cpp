#include "fabric/internal/distance_transport.h"

#include <fcntl.h>
#include <sched.h>
#include <sys/mman.h>
#include <unistd.h>

#include <algorithm>
#include <cstring>

#include "common/byte_codec.h"
#include "common/host_identity.h"
#include "common/status_try.h"
#include "fabric/device_memory.h"

namespace moerl::fabric {

namespace {

constexpr char magic[8] = {'M', 'O', 'E', 'R', 'L', 'D', 'T', '1'};

// The boot id and the namespaces that decide whether two ranks can map each other's memfds
// (same kernel, /proc of one pid namespace) and whether they share a network (a rank in
// another network namespace stands for another host).
std::string this_host_id() { return host_identity({"net", "pid"}); }

struct address_fields {
  std::string host_id;
  int64_t pid = 0, inbox_fd = -1;
  uint64_t inbox_addr = 0;
  std::string fabric_address;
};

// "MOERLDT1" | str host_id | i64 pid | i64 inbox_fd | u64 inbox_addr | the fabric's address
// (the rest), in common/byte_codec.h's encoding.
result<address_fields> parse_address(const std::string& a) {
  address_fields f;
  byte_reader r(a.data(), a.size());
  const bool ours = r.raw(sizeof magic) == std::string(magic, sizeof magic);
  f.host_id = r.str();
  if (!ours || !r.ok())
    return error{errc::malformed_message, "distance transport: peer address is not ours"};
  f.pid = r.i64();
  f.inbox_fd = r.i64();
  f.inbox_addr = r.u64();
  if (!r.ok()) return error{errc::malformed_message, "distance transport: short peer address"};
  f.fabric_address = r.raw(r.remaining());
  return f;
}

}  // namespace

result<std::unique_ptr<transport>> distance_transport::open(const transport_options& options,
                                                            std::unique_ptr<transport> fabric) {
  std::unique_ptr<distance_transport> t(new distance_transport());
  t->fabric_ = std::move(fabric);
  t->host_id_ = options.host_id.empty() ? this_host_id() : options.host_id;
  t->abort_ = options.abort;
  ASSIGN_OR_RETURN(auto in, host_inbox::create());
  t->inbox_ = std::move(in);
  t->desc_ = t->fabric_->describe();
  return std::unique_ptr<transport>(std::move(t));
}

distance_transport::~distance_transport() {
  close_device_mappings();
  close_peer_mappings();
  peers_.clear();   // peers' mappings
  fabric_.reset();  // registrations close before the memory they cover is unmapped
  for (const owned_region& r : owned_) {
    ::munmap(r.ptr, r.size);
    ::close(r.fd);
  }
  for (void* p : owned_device_) device_free(p);
}

void distance_transport::close_device_mappings() {
  for (peer& p : peers_) {
    for (const device_mapping& m : p.device_regions) device_ipc_close(m.base);
    p.device_regions.clear();
  }
}

void distance_transport::close_peer_mappings() {
  for (peer& p : peers_) {
    for (const peer_mapping& m : p.regions) ::munmap(m.base, m.size);
    p.regions.clear();
  }
}

std::string distance_transport::address() const {
  byte_writer w;
  w.raw(magic, sizeof magic);
  w.str(host_id_);
  w.i64(::getpid());
  w.i64(inbox_.fd());
  w.u64(inbox_.addr());
  w.raw(fabric_->address());
  return std::move(w.bytes());
}

status distance_transport::set_peers(const std::vector<std::string>& addresses) {
  const std::string mine = address();
  std::vector<std::string> fabric_addresses;
  std::vector<peer> peers(addresses.size());
  desc_.peer_paths.clear();
  my_index_ = -1;
  for (size_t i = 0; i < addresses.size(); ++i) {
    ASSIGN_OR_RETURN(auto f, parse_address(addresses[i]));
    if (addresses[i] == mine) my_index_ = static_cast<int>(i);
    fabric_addresses.push_back(f.fabric_address);
    peer& p = peers[i];
    p.pid = f.pid;
    if (f.host_id != host_id_) {
      p.distance = peer_distance::network;
      poll_fabric_ = true;
    } else {
      const bool same_process = f.pid == ::getpid();
      p.distance = same_process ? peer_distance::same_process : peer_distance::same_host;
      auto in = host_inbox::attach(f.pid, f.inbox_fd, f.inbox_addr, same_process);
      if (!in) return error{in.err().code, "peer " + std::to_string(i) + ": " + in.err().message};
      p.inbox = std::move(*in);
      p.inbox.set_num_ranks(static_cast<int>(addresses.size()));
    }
    desc_.peer_paths.push_back(peer_distance_name(p.distance));
  }
  // How writes into our device regions would travel from each peer (a CUDA build only:
  // elsewhere there are no device regions to describe).
  desc_.peer_device_paths.clear();
  if (cuda_build())
    for (const peer& p : peers)
      desc_.peer_device_paths.push_back(p.distance == peer_distance::same_process
                                            ? "cuda_same_process"
                                        : p.distance == peer_distance::same_host ? "cuda_ipc"
                                        : fabric_->describe().hmem               ? "fi_hmem"
                                                                                 : "host_staging");
  if (my_index_ < 0)
    return error{errc::invalid_argument, "distance transport: our address is not among the peers"};
  inbox_.set_num_ranks(static_cast<int>(addresses.size()));
  close_device_mappings();
  close_peer_mappings();
  peers_ = std::move(peers);
  return fabric_->set_peers(fabric_addresses);
}

result<local_region> distance_transport::register_memory(void* ptr, size_t size) {
  poll_fabric_ = true;  // written through the fabric, by peers at any distance
  return fabric_->register_memory(ptr, size);
}

result<char*> distance_transport::map_shared(size_t size, bool populate) {
  const int fd = ::memfd_create("moerl-ep-region", MFD_CLOEXEC);
  if (fd < 0) return error{errc::io_error, "distance transport: memfd_create failed"};
  if (::ftruncate(fd, static_cast<off_t>(size)) != 0) {
    ::close(fd);
    return error{errc::capacity_exceeded,
                 "distance transport: cannot size a region of " + std::to_string(size) + " bytes"};
  }
  void* p = ::mmap(nullptr, size, PROT_READ | PROT_WRITE,
                   MAP_SHARED | (populate ? MAP_POPULATE : 0), fd, 0);
  if (p == MAP_FAILED) {
    ::close(fd);
    return error{errc::capacity_exceeded,
                 "distance transport: cannot map " + std::to_string(size) + " bytes"};
  }
  owned_.push_back({static_cast<char*>(p), size, fd});
  return static_cast<char*>(p);
}

result<local_region> distance_transport::allocate_region(size_t size) {
  ASSIGN_OR_RETURN(auto p, map_shared(size, true));
  ASSIGN_OR_RETURN(auto reg, fabric_->register_memory(p, size));
  reg.remote.host_addr = reinterpret_cast<uint64_t>(p);
  reg.remote.host_fd = owned_.back().fd;
  return reg;
}

result<local_region> distance_transport::allocate_host_region(size_t size) {
  ASSIGN_OR_RETURN(auto p, map_shared(size, false));
  local_region reg;
  reg.ptr = p;
  reg.size = size;
  reg.remote.size = size;
  reg.remote.host_addr = reinterpret_cast<uint64_t>(p);
  reg.remote.host_fd = owned_.back().fd;
  return reg;
}

result<local_region> distance_transport::allocate_device_region(size_t size) {
  ASSIGN_OR_RETURN(auto a, device_allocate(size));
  owned_device_.push_back(a.ptr);
  // Network peers write it through the fabric only where the provider registers device
  // memory (FI_HMEM); elsewhere (tcp) it stays unregistered and they stage through host
  // memory (remote.fabric_registered 0: write() names that instead of posting).
  local_region reg;
  if (fabric_->describe().hmem) {
    ASSIGN_OR_RETURN(reg, fabric_->register_device_memory(a.ptr, size, a.device));
    poll_fabric_ = true;
  } else {
    reg.ptr = a.ptr;
    reg.size = size;
    reg.remote.size = size;
    reg.remote.fabric_registered = 0;
  }
  reg.remote.memory = static_cast<uint8_t>(memory_kind::cuda);
  reg.remote.host_addr = reinterpret_cast<uint64_t>(a.ptr);
  reg.remote.host_fd = -1;
  reg.remote.device = static_cast<int16_t>(a.device);
  static_assert(sizeof reg.remote.ipc_handle == kIpcHandleBytes);
  std::memcpy(reg.remote.ipc_handle, a.ipc_handle, kIpcHandleBytes);
  return reg;
}

result<char*> distance_transport::mapped_device(int peer_index, const remote_region& dst,
                                                uint64_t offset, size_t len) {
  peer& p = peers_[peer_index];
  if (offset + len > dst.size)
    return error{errc::invalid_argument, "write of " + std::to_string(len) + " bytes at " +
                                             std::to_string(offset) + " outside the peer's " +
                                             std::to_string(dst.size) + "-byte device region"};
  if (p.distance == peer_distance::same_process)
    return reinterpret_cast<char*>(dst.host_addr) + offset;
  for (const device_mapping& m : p.device_regions)
    if (m.size == dst.size && std::memcmp(m.handle, dst.ipc_handle, kIpcHandleBytes) == 0)
      return m.base + offset;
  auto opened = device_ipc_open(dst.ipc_handle);
  if (!opened)
    return error{opened.err().code, "same-host peer " + std::to_string(peer_index) +
                                        "'s device region: " + opened.err().message};
  device_mapping m{};
  std::memcpy(m.handle, dst.ipc_handle, kIpcHandleBytes);
  m.size = dst.size;
  m.base = static_cast<char*>(*opened);
  p.device_regions.push_back(m);
  return m.base + offset;
}

result<char*> distance_transport::device_mapped(int peer_index, const remote_region& dst,
                                                uint64_t offset, size_t len) {
  if (peer_index < 0 || peer_index >= static_cast<int>(peers_.size()) ||
      peers_[peer_index].distance == peer_distance::network ||
      dst.memory != static_cast<uint8_t>(memory_kind::cuda))
    return static_cast<char*>(nullptr);
  return mapped_device(peer_index, dst, offset, len);
}

status distance_transport::write_device(int peer_index, const void* src, size_t len,
                                        const remote_region& dst, uint64_t offset, uint32_t imm,
                                        int64_t deadline_ns) {
  ASSIGN_OR_RETURN(char* to, mapped_device(peer_index, dst, offset, len));
  if (auto st = device_copy(to, src, len); !st)
    return error{st.err().code, "write to same-host peer " + std::to_string(peer_index) +
                                    "'s device region: " + st.err().message};
  return notify(peer_index, imm, 1, deadline_ns);
}

char* distance_transport::mapped(int peer_index, const remote_region& dst, uint64_t offset,
                                 size_t len) {
  peer& p = peers_[peer_index];
  // Device regions are never handed out for CPU stores (write() copies into them).
  if (p.distance == peer_distance::network || dst.host_fd < 0 || offset + len > dst.size ||
      dst.memory != static_cast<uint8_t>(memory_kind::host))
    return nullptr;
  if (p.distance == peer_distance::same_process)
    return reinterpret_cast<char*>(dst.host_addr) + offset;
  for (const peer_mapping& m : p.regions)
    if (m.fd == dst.host_fd && m.size == dst.size) return m.base + offset;
  const std::string path = "/proc/" + std::to_string(p.pid) + "/fd/" + std::to_string(dst.host_fd);
  const int f = ::open(path.c_str(), O_RDWR | O_CLOEXEC);
  if (f < 0) return nullptr;
  void* m = ::mmap(nullptr, dst.size, PROT_READ | PROT_WRITE, MAP_SHARED, f, 0);
  ::close(f);
  if (m == MAP_FAILED) return nullptr;
  p.regions.push_back({dst.host_fd, static_cast<char*>(m), dst.size});
  return static_cast<char*>(m) + offset;
}

status distance_transport::write(int peer_index, const local_region& src_region, const void* src,
                                 size_t len, const remote_region& dst, uint64_t offset,
                                 uint32_t imm, int64_t deadline_ns) {
  if (peer_index < 0 || peer_index >= static_cast<int>(peers_.size()))
    return error{errc::invalid_argument, "write to unknown peer " + std::to_string(peer_index)};
  const bool device = dst.memory == static_cast<uint8_t>(memory_kind::cuda);
  if (device && peers_[peer_index].distance != peer_distance::network)
    return write_device(peer_index, src, len, dst, offset, imm, deadline_ns);
  const bool from_device = src_region.remote.memory == static_cast<uint8_t>(memory_kind::cuda);
  const bool via_fabric = peers_[peer_index].distance == peer_distance::network || dst.host_fd < 0;
  if (via_fabric &&
      ((device && !dst.fabric_registered) || (from_device && !src_region.remote.fabric_registered)))
    return error{errc::invalid_argument,
                 "write to peer " + std::to_string(peer_index) +
                     " through the fabric: device memory the provider did not register (no "
                     "FI_HMEM, e.g. tcp) cannot travel that way; stage it through host memory"};
  if (via_fabric)
    return fabric_->write(peer_index, src_region, src, len, dst, offset, imm, deadline_ns);
  if (offset + len > dst.size)
    return error{errc::invalid_argument, "write of " + std::to_string(len) + " bytes at " +
                                             std::to_string(offset) + " outside the peer's " +
                                             std::to_string(dst.size) + "-byte region"};
  char* to = mapped(peer_index, dst, offset, len);
  if (!to)
    return error{errc::peer_dead,
                 "cannot map a region of same-host peer " + std::to_string(peer_index)};
  if (from_device) {
    if (auto st = device_copy(to, src, len); !st) return st;
  } else if (len > 0) {
    std::memcpy(to, src, len);
  }
  return notify(peer_index, imm, 1, deadline_ns);
}

status distance_transport::notify(int peer_index, uint32_t imm, int64_t count,
                                  int64_t deadline_ns) {
  peer& p = peers_[peer_index];
  if (p.distance == peer_distance::network)
    return transport::notify(peer_index, imm, count, deadline_ns);
  for (int64_t i = 0; i < count; ++i)
    while (!p.inbox.try_push(my_index_, imm)) {
      // The peer's ring is full: wake it, and keep draining ours (the peer may wait for us
      // to) until it reads.
      p.inbox.ring();
      inbox_.drain(pending_);
      if (now_ns() > deadline_ns)
        return error{errc::timeout, "same-host peer " + std::to_string(peer_index) +
                                        " did not read its inbox before the deadline"};
      if (abort_ && abort_->load(std::memory_order_acquire))
        return error{errc::peer_dead, "same-host peer " + std::to_string(peer_index) +
                                          " did not read its inbox, then aborted (a member of "
                                          "the group was lost)"};
      sched_yield();
    }
  if (count > 0) p.inbox.ring();
  return {};
}

status distance_transport::progress(std::vector<uint32_t>& imms) {
  if (!pending_.empty()) {
    imms.insert(imms.end(), pending_.begin(), pending_.end());
    pending_.clear();
  }
  inbox_.drain(imms);
  if (poll_fabric_ || fabric_->outstanding() > 0) return fabric_->progress(imms);
  return {};
}

void distance_transport::idle_wait(int64_t max_ns) {
  // With network peers the fabric's completions ring no doorbell: sleep briefly only.
  inbox_.sleep(poll_fabric_ ? std::min<int64_t>(max_ns, 50000) : max_ns);
}

}  // namespace moerl::fabric
