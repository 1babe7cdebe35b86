#include "actors/node_group_core.h"

#include <algorithm>

namespace moerl::actors {

std::string group_fingerprint::difference(const group_fingerprint& group) const {
  std::string out;
  auto add = [&](const char* what, const std::string& mine, const std::string& theirs) {
    if (mine == theirs) return;
    out += (out.empty() ? "" : "; ") + std::string(what) + " " + mine +
           " differs from the group's " + theirs;
  };
  add("model shape", model_shape, group.model_shape);
  add("config hash", config_hash, group.config_hash);
  add("moerl version", version, group.version);
  return out;
}

namespace {

std::string participants_key(const std::string& channel, const std::vector<int>& p) {
  std::string k = channel + ":";
  for (int m : p) k += std::to_string(m) + ",";
  return k;
}

}  // namespace

node_group_core::group_state* node_group_core::group_of(const std::string& node_id) {
  auto it = member_group_.find(node_id);
  return it == member_group_.end() ? nullptr : &groups_.at(it->second);
}
const node_group_core::group_state* node_group_core::group_of(const std::string& node_id) const {
  auto it = member_group_.find(node_id);
  return it == member_group_.end() ? nullptr : &groups_.at(it->second);
}

status node_group_core::join(const group_join_request& req, int64_t now_ms) {
  if (req.group.empty()) return error{errc::invalid_argument, "group join: no group name"};
  if (req.group_size < 1 || req.ranks_per_node < 1)
    return error{errc::invalid_argument,
                 "group " + req.group + ": size and ranks per node must be >= 1"};
  auto [it, fresh] = groups_.try_emplace(req.group);
  group_state& g = it->second;
  if (fresh) {
    g.name = req.group;
    g.role = req.role;
    g.group_size = req.group_size;
    g.ranks_per_node = req.ranks_per_node;
    g.fingerprint = req.fingerprint;
    g.forming_since_ms = now_ms;
    if (auto saved = saved_.find(req.group); saved != saved_.end()) {
      g.incarnation = saved->second.incarnation;
      g.reformed = std::move(saved->second.reformed);
      saved_.erase(saved);
    }
  }
  const std::string who = "node " + req.node_name + " joining group " + req.group + ": ";
  if (req.role != g.role)
    return error{errc::invalid_argument,
                 who + "role " + req.role + " differs from the group's " + g.role};
  if (req.group_size != g.group_size || req.ranks_per_node != g.ranks_per_node)
    return error{errc::invalid_argument,
                 who + "size " + std::to_string(req.group_size) + " x " +
                     std::to_string(req.ranks_per_node) + " ranks differs from the group's " +
                     std::to_string(g.group_size) + " x " + std::to_string(g.ranks_per_node)};
  if (auto d = req.fingerprint.difference(g.fingerprint); !d.empty())
    return error{errc::invalid_argument, who + d};
  if (auto other = member_group_.find(req.node_id);
      other != member_group_.end() && other->second != req.group)
    return error{errc::invalid_argument, who + "it is a member of group " + other->second};
  if (g.state == "formed") {
    // Already a member of the formed incarnation: nothing to do (a repeated join).
    if (std::find(g.members.begin(), g.members.end(), req.node_id) != g.members.end())
      return ok_status();
    // A live member holds this name: the joiner is its replacement, come before the loss was
    // noticed. Refused; it retries, and the loss (link or heartbeat) breaks the group.
    return error{errc::capacity_exceeded,
                 who + "the group is formed and running; wait for it to break"};
  }
  for (const auto& [id, name] : g.joining)
    if (name == req.node_name && id != req.node_id)
      return error{errc::capacity_exceeded, who + "another node with this name is joining"};
  g.joining[req.node_id] = req.node_name;
  g.names[req.node_id] = req.node_name;
  member_group_[req.node_id] = req.group;
  if (g.joining.size() == g.group_size) form(g, now_ms);
  return ok_status();
}

void node_group_core::form(group_state& g, int64_t now_ms) {
  std::vector<std::pair<std::string, std::string>> by_name;  // (name, id)
  for (const auto& [id, name] : g.joining) by_name.emplace_back(name, id);
  std::sort(by_name.begin(), by_name.end());
  g.members.clear();
  g.last_member_names.clear();
  for (auto& [name, id] : by_name) {
    g.members.push_back(id);
    g.last_member_names.insert(name);
  }
  g.joining.clear();
  g.rounds.clear();
  g.calls.clear();
  g.state = "formed";
  ++g.incarnation;
  if (!g.reformed.empty() && g.reformed.back().formed_ms < 0) g.reformed.back().formed_ms = now_ms;
  ++history_version_;
}

std::optional<group_view> node_group_core::view(const std::string& node_id) const {
  const group_state* g = group_of(node_id);
  if (!g || g->state != "formed") return std::nullopt;
  auto it = std::find(g->members.begin(), g->members.end(), node_id);
  if (it == g->members.end()) return std::nullopt;  // joining the next incarnation
  group_view v;
  v.group = g->name;
  v.incarnation = g->incarnation;
  v.member_index = static_cast<uint32_t>(it - g->members.begin());
  v.group_size = g->group_size;
  v.ranks_per_node = g->ranks_per_node;
  for (const auto& id : g->members) v.members.push_back(g->names.at(id));
  return v;
}

std::vector<std::string> node_group_core::dissolve(group_state& g, const std::string& lost,
                                                   const std::string& cause, int64_t now_ms,
                                                   bool orderly) {
  const std::string name = g.names.count(lost) ? g.names.at(lost) : lost;
  const std::string why = "group " + g.name + " broke: member " + name + " " + cause;
  for (auto& [key, r] : g.rounds)
    for (auto& [p, call] : r.got) failed_.push_back({call.first, error{errc::peer_dead, why}});
  g.rounds.clear();
  g.calls.clear();
  std::vector<std::string> others;
  for (const auto& id : g.members)
    if (id != lost) others.push_back(id);
  // Everyone joins again; the lost node leaves the group (its replacement joins afresh).
  for (const auto& id : g.members) member_group_.erase(id);
  g.broken_members.clear();
  g.broken_members.insert(g.members.begin(), g.members.end());
  g.members.clear();
  g.state = orderly ? "stopped" : "forming";
  g.forming_since_ms = now_ms;
  g.last_missing_log_ms = 0;
  if (!orderly) g.reformed.push_back({now_ms, -1, name + " " + cause});
  ++history_version_;
  return others;
}

std::vector<std::string> node_group_core::member_lost(const std::string& node_id,
                                                      const std::string& cause, int64_t now_ms,
                                                      bool orderly) {
  group_state* g = group_of(node_id);
  if (!orderly && (!g || g->state != "formed")) name_dead_member_as_cause(node_id, cause);
  if (!g) return {};
  if (g->state != "formed") {  // not formed: it just leaves the forming set
    g->joining.erase(node_id);
    member_group_.erase(node_id);
    return {};
  }
  if (std::find(g->members.begin(), g->members.end(), node_id) == g->members.end()) {
    g->joining.erase(node_id);
    member_group_.erase(node_id);
    return {};
  }
  return dissolve(*g, node_id, cause, now_ms, orderly);
}

std::vector<std::string> node_group_core::member_failed(const std::string& node_id,
                                                        uint64_t incarnation,
                                                        const std::string& cause, int64_t now_ms) {
  group_state* g = group_of(node_id);
  if (!g || g->state != "formed" || g->incarnation != incarnation) return {};
  auto others = dissolve(*g, node_id, cause, now_ms, false);
  g->reformed.back().reported_by_survivor = true;
  // The reporter is alive and rejoins like the others; it gets no stop message.
  return others;
}

void node_group_core::name_dead_member_as_cause(const std::string& node_id,
                                                const std::string& cause) {
  for (auto& [name, g] : groups_) {
    if (!g.broken_members.count(node_id) || g.reformed.empty()) continue;
    reformation& r = g.reformed.back();
    if (r.formed_ms >= 0 || !r.reported_by_survivor) continue;
    const std::string who = g.names.count(node_id) ? g.names.at(node_id) : node_id;
    r.cause = who + " " + cause + " (first reported as: " + r.cause + ")";
    r.reported_by_survivor = false;
  }
}

std::vector<gather_completion> node_group_core::allgather(
    uint64_t request, const std::string& node_id, uint64_t incarnation, const std::string& channel,
    const std::vector<int>& participants, int self, std::string payload) {
  auto refuse = [&](errc c, std::string why) {
    return std::vector<gather_completion>{{request, error{c, std::move(why)}}};
  };
  group_state* g = group_of(node_id);
  if (!g || g->state != "formed" || g->incarnation != incarnation)
    return refuse(errc::peer_dead, "group all-gather: incarnation " + std::to_string(incarnation) +
                                       " of the node's group is over");
  auto me = std::find(g->members.begin(), g->members.end(), node_id);
  if (me == g->members.end())
    return refuse(errc::invalid_argument, "group all-gather: not a member");
  const int index = static_cast<int>(me - g->members.begin());
  int size = 0;
  bool mine = false;
  if (channel == "members") {
    size = static_cast<int>(g->group_size);
    mine = self == index;
  } else if (channel == "fabric") {
    size = static_cast<int>(g->group_size * g->ranks_per_node);
    mine = self / static_cast<int>(g->ranks_per_node) == index;
  } else {
    return refuse(errc::invalid_argument, "group all-gather: unknown channel " + channel);
  }
  if (!mine)
    return refuse(errc::invalid_argument, "group all-gather: participant " + std::to_string(self) +
                                              " is not this member's");
  if (participants.empty() || !std::is_sorted(participants.begin(), participants.end()) ||
      std::adjacent_find(participants.begin(), participants.end()) != participants.end() ||
      participants.front() < 0 || participants.back() >= size ||
      !std::binary_search(participants.begin(), participants.end(), self))
    return refuse(errc::invalid_argument,
                  "group all-gather: participants must be sorted, unique, within 0.." +
                      std::to_string(size - 1) + " and include " + std::to_string(self));
  const std::string pkey = participants_key(channel, participants);
  const uint64_t n = g->calls[pkey + "@" + std::to_string(self)]++;
  const std::string key = pkey + "#" + std::to_string(n);
  round& r = g->rounds[key];
  r.participants = participants;
  r.got[self] = {request, std::move(payload)};
  if (r.got.size() < participants.size()) return {};
  std::vector<std::string> all;
  for (int p : participants) all.push_back(r.got[p].second);
  std::vector<gather_completion> done;
  for (int p : participants) done.push_back({r.got[p].first, all});
  g->rounds.erase(key);
  return done;
}

std::vector<gather_completion> node_group_core::take_failed_gathers() {
  std::vector<gather_completion> out;
  out.swap(failed_);
  return out;
}

std::vector<std::string> node_group_core::tick(int64_t now_ms) {
  std::vector<std::string> lines;
  for (auto& [name, g] : groups_) {
    if (g.state != "forming" || now_ms - g.forming_since_ms < form_timeout_ms_) continue;
    if (g.last_missing_log_ms != 0 && now_ms - g.last_missing_log_ms < form_timeout_ms_) continue;
    g.last_missing_log_ms = now_ms;
    std::set<std::string> have;
    for (const auto& [id, n] : g.joining) have.insert(n);
    std::string missing;
    for (const auto& n : g.last_member_names)
      if (!have.count(n)) missing += (missing.empty() ? "" : ", ") + n;
    std::string joined;
    for (const auto& n : have) joined += (joined.empty() ? "" : ", ") + n;
    lines.push_back("group " + name + " cannot form after " +
                    std::to_string((now_ms - g.forming_since_ms) / 1000) +
                    " s: " + std::to_string(have.size()) + " of " + std::to_string(g.group_size) +
                    " members joined [" + joined + "]" +
                    (missing.empty() ? "" : "; missing " + missing));
  }
  return lines;
}

nlohmann::json node_group_core::node_json(const std::string& node_id) const {
  const group_state* g = group_of(node_id);
  if (!g) return nullptr;
  auto it = std::find(g->members.begin(), g->members.end(), node_id);
  if (it == g->members.end()) return {{"group", g->name}, {"rank", nullptr}, {"state", "joining"}};
  const auto index = static_cast<uint32_t>(it - g->members.begin());
  nlohmann::json ranks = nlohmann::json::array();
  for (uint32_t k = 0; k < g->ranks_per_node; ++k) ranks.push_back(index * g->ranks_per_node + k);
  return {{"group", g->name}, {"rank", index}, {"ranks", ranks}, {"state", g->state}};
}

nlohmann::json node_group_core::groups_json() const {
  nlohmann::json out = nlohmann::json::array();
  for (const auto& [name, g] : groups_) {
    nlohmann::json members = nlohmann::json::array();
    if (g.state == "formed")
      for (const auto& id : g.members) members.push_back(g.names.at(id));
    else
      for (const auto& [id, n] : g.joining) members.push_back(n);
    nlohmann::json reformed = nlohmann::json::array();
    for (const auto& r : g.reformed)
      reformed.push_back(
          {{"at", r.broken_ms / 1000.0},
           {"restored_version",
            r.restored_version < 0 ? nlohmann::json(nullptr) : nlohmann::json(r.restored_version)},
           {"cause", r.cause},
           {"downtime_s", r.formed_ms < 0 ? nlohmann::json(nullptr)
                                          : nlohmann::json((r.formed_ms - r.broken_ms) / 1000.0)}});
    out.push_back({{"name", name},
                   {"role", g.role},
                   {"size", g.group_size},
                   {"ranks_per_node", g.ranks_per_node},
                   {"members", members},
                   {"state", g.state},
                   {"incarnation", g.incarnation},
                   {"reformed", reformed}});
  }
  return out;
}

void node_group_core::restored(const std::string& node_id, uint64_t incarnation, uint64_t version) {
  group_state* g = group_of(node_id);
  if (!g || g->incarnation != incarnation || g->reformed.empty()) return;
  g->reformed.back().restored_version = static_cast<int64_t>(version);
  ++history_version_;
}

nlohmann::json node_group_core::history_json() const {
  auto entry = [](uint64_t incarnation, const std::vector<reformation>& reformed) {
    nlohmann::json rs = nlohmann::json::array();
    for (const auto& r : reformed)
      rs.push_back({{"broken_ms", r.broken_ms},
                    {"formed_ms", r.formed_ms},
                    {"cause", r.cause},
                    {"restored_version", r.restored_version}});
    return nlohmann::json{{"incarnation", incarnation}, {"reformed", rs}};
  };
  nlohmann::json groups = nlohmann::json::object();
  for (const auto& [name, g] : saved_) groups[name] = entry(g.incarnation, g.reformed);
  for (const auto& [name, g] : groups_) groups[name] = entry(g.incarnation, g.reformed);
  return {{"format", 1}, {"groups", groups}};
}

status node_group_core::restore_history(const nlohmann::json& history, int64_t now_ms) {
  auto bad = [](const std::string& what) {
    return error{errc::invalid_argument, "group history: " + what};
  };
  if (!history.is_object() || history.value("format", 0) != 1)
    return bad("not a format-1 history object");
  const auto groups = history.find("groups");
  if (groups == history.end() || !groups->is_object()) return bad("no \"groups\" object");
  std::map<std::string, saved_group> restored;
  for (const auto& [name, g] : groups->items()) {
    const auto inc = g.find("incarnation");
    const auto rs = g.find("reformed");
    if (!g.is_object() || inc == g.end() || !inc->is_number_unsigned() || rs == g.end() ||
        !rs->is_array())
      return bad("group " + name + " needs an unsigned \"incarnation\" and a \"reformed\" list");
    saved_group& s = restored[name];
    s.incarnation = inc->get<uint64_t>();
    for (const auto& r : *rs) {
      if (!r.is_object() || !r.contains("broken_ms") || !r["broken_ms"].is_number_integer() ||
          !r.contains("formed_ms") || !r["formed_ms"].is_number_integer() || !r.contains("cause") ||
          !r["cause"].is_string() || !r.contains("restored_version") ||
          !r["restored_version"].is_number_integer())
        return bad("group " + name + ": a re-formation needs integer broken_ms, formed_ms, " +
                   "restored_version and a string cause");
      s.reformed.push_back({r["broken_ms"].get<int64_t>(), r["formed_ms"].get<int64_t>(),
                            r["cause"].get<std::string>(), r["restored_version"].get<int64_t>()});
    }
    const bool re_forming = !s.reformed.empty() && s.reformed.back().formed_ms < 0;
    if (s.incarnation > 0 && !re_forming)
      s.reformed.push_back({now_ms, -1, "coordinator restarted (every member joins again)"});
  }
  saved_ = std::move(restored);
  ++history_version_;
  return ok_status();
}

size_t node_group_core::num_reformed(const std::string& group) const {
  auto it = groups_.find(group);
  return it == groups_.end() ? 0 : it->second.reformed.size();
}

}  // namespace moerl::actors
