#include "actors/internal/coordinator_groups.h"

#include <caf/all.hpp>

#include "common/log.h"

namespace moerl::actors {

std::string group_join(coordinator_core& core, const std::string& node_id, const std::string& group,
                       const std::string& role, uint32_t size, uint32_t ranks_per_node,
                       const std::string& model_shape, const std::string& config_hash,
                       const std::string& version) {
  auto n = core.nodes().find(node_id);
  if (n == core.nodes().end() || n->second.state == "dead")
    return encode_error(errc::unknown_node, "group join: node " + node_id + " is not registered");
  group_join_request req;
  req.group = group;
  req.node_id = node_id;
  req.node_name = n->second.name;
  req.role = role;
  req.group_size = size;
  req.ranks_per_node = ranks_per_node;
  req.fingerprint = {model_shape, config_hash, version};
  auto st = core.groups().join(req, core.now_ms());
  if (!st) return encode_error(st.err().code, st.err().message);
  // A new incarnation is saved before any member can see it (a failed save: the tick retries).
  core.save_group_history();
  if (auto v = core.groups().view(node_id); v && v->member_index == 0)
    logger("coordinator")
        ->info("group {} formed (incarnation {}) with {} members", group, v->incarnation,
               v->group_size);
  return "";
}

std::vector<std::string> group_view_reply(const coordinator_core& core,
                                          const std::string& node_id) {
  auto v = core.groups().view(node_id);
  if (!v) return {};
  std::vector<std::string> r{v->group, std::to_string(v->incarnation),
                             std::to_string(v->member_index), std::to_string(v->group_size),
                             std::to_string(v->ranks_per_node)};
  r.insert(r.end(), v->members.begin(), v->members.end());
  return r;
}

namespace {

void answer(group_gathers& g, std::vector<gather_completion> done) {
  for (auto& d : done) {
    auto it = g.waiting.find(d.request);
    if (it == g.waiting.end()) continue;
    if (d.contributions)
      it->second.deliver(std::move(*d.contributions));
    else
      it->second.deliver(caf::make_error(caf::sec::runtime_error, d.contributions.err().message));
    g.waiting.erase(it);
  }
}

}  // namespace

void group_gather(coordinator_core& core, group_gathers& g, caf::response_promise rp,
                  const std::string& node_id, uint64_t incarnation, const std::string& channel,
                  const std::string& participants, int32_t self, std::string payload) {
  std::vector<int> p;
  size_t at = 0;
  while (at < participants.size()) {
    size_t end = participants.find(',', at);
    if (end == std::string::npos) end = participants.size();
    const std::string item = participants.substr(at, end - at);
    if (item.empty() || item.size() > 9 ||
        item.find_first_not_of("0123456789") != std::string::npos) {
      rp.deliver(caf::make_error(
          caf::sec::runtime_error,
          "group all-gather: participants '" + participants + "' are not comma-separated ranks"));
      return;
    }
    p.push_back(std::stoi(item));
    at = end + 1;
  }
  const uint64_t id = g.next_request++;
  g.waiting.emplace(id, std::move(rp));
  answer(g,
         core.groups().allgather(id, node_id, incarnation, channel, p, self, std::move(payload)));
  answer_failed_gathers(core, g);
}

void answer_failed_gathers(coordinator_core& core, group_gathers& g) {
  answer(g, core.groups().take_failed_gathers());
}

}  // namespace moerl::actors
