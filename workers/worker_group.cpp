#include "workers/worker_group.h"

#include <unistd.h>

#include "common/free_port.h"

namespace moerl::workers {
namespace {

// The address the other members' workers reach rank 0's store at: node.host, or this host's
// name when the node listens on every interface.
std::string rendezvous_host(const config& cfg) {
  std::string h = cfg.get_string("node.host");
  if (h.empty() || h == "0.0.0.0" || h == "::") {
    char name[256] = {0};
    if (::gethostname(name, sizeof(name) - 1) == 0 && name[0]) return name;
    return "127.0.0.1";
  }
  return h;
}

}  // namespace

result<group_rendezvous> pick_rendezvous(const config& cfg, uint64_t incarnation) {
  group_rendezvous r;
  r.addr = rendezvous_host(cfg);
  // Rank 0's worker binds it a moment later (torch.distributed's TCPStore takes a port, not a
  // socket); a port taken in between fails that worker's start, which breaks the incarnation,
  // and the next one picks anew.
  auto port = free_tcp_port(r.addr);
  if (!port) return error{port.err().code, "rendezvous: " + port.err().message};
  r.port = *port;
  r.incarnation = incarnation;
  return r;
}

nlohmann::json to_json(const group_rendezvous& r) {
  return {{"op", "rendezvous"},   {"addr", r.addr},          {"port", r.port},
          {"version", r.version}, {"resume", r.resume_step}, {"incarnation", r.incarnation}};
}

result<group_rendezvous> parse_rendezvous(const std::string& bytes, const std::string& group) {
  auto j = nlohmann::json::parse(bytes, nullptr, false);
  if (!j.is_object() || j.value("op", "") != "rendezvous" || !j.contains("addr") ||
      !j["addr"].is_string() || !j.contains("port") || !j["port"].is_number_unsigned() ||
      j["port"].get<uint64_t>() == 0 || j["port"].get<uint64_t>() > 65535)
    return error(errc::malformed_message,
                 group +
                     ": member 0's first round is not a rendezvous {op, addr, port, "
                     "version, resume}: " +
                     bytes.substr(0, 200));
  group_rendezvous r;
  r.addr = j["addr"].get<std::string>();
  r.port = j["port"].get<uint64_t>();
  r.version = j.value("version", uint64_t(0));
  r.resume_step = j.value("resume", uint64_t(0));
  r.incarnation = j.value("incarnation", uint64_t(0));
  return r;
}

nlohmann::json group_place(const group_rendezvous& r, uint32_t rank, uint32_t world) {
  return {{"rank", rank},
          {"world_size", world},
          {"addr", r.addr},
          {"port", r.port},
          {"incarnation", r.incarnation}};
}

}  // namespace moerl::workers
