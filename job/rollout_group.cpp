#include "job/internal/rollout_group.h"

#include <algorithm>

#include <nlohmann/json.hpp>

#include "job/ep_policy_group.h"
#include "job/group_bootstrap.h"

namespace moerl::job {
namespace {

// A follower waits for the leader's next command as long as the leader waits for work; the
// group's breaking ends the wait at once (the coordinator fails the round).
constexpr int64_t kCommandWaitMs = 3600 * 1000;

// What every member holds: its ranks of the group's EP instance and the version loaded.
struct member_share {
  rollout_group_setup setup;
  actors::trainer_group& group;
  std::unique_ptr<ep_policy_group> ep;
  uint64_t loaded = 0;
  int64_t op_timeout_ms = 10000;

  member_share(const rollout_group_setup& s, actors::trainer_group& g) : setup(s), group(g) {}

  status start() {
    op_timeout_ms = setup.cfg.get_int("fabric.op_timeout_ms");
    const int rpm = static_cast<int>(group.ranks_per_member());
    ep_group_shape shape;
    shape.num_ranks = static_cast<int>(group.num_members()) * rpm;
    if (setup.rows_per_group < shape.num_ranks)
      return error{errc::invalid_config,
                   "rollout group of " + std::to_string(shape.num_ranks) +
                       " ranks: " + std::to_string(setup.rows_per_group) +
                       " rows per prompt group (ledger.group_size) cannot keep every rank busy"};
    shape.max_decode_rows =
        rows_of_rank(int64_t{setup.rows_per_group} * std::max(setup.max_prompts_per_generate, 1), 0,
                     shape.num_ranks)
            .count;
    shape.first_rank = static_cast<int>(group.member_index()) * rpm;
    shape.num_local_ranks = rpm;
    actors::trainer_group* g = &group;
    shape.make_bootstrap = [g](int rank) { return make_group_bootstrap(*g, rank); };
    shape.abort = group.abort_flag();
    shape.dense_collectives = true;  // the followers' rows cross on them (exchange_rows)
    auto made = ep_policy_group::create(setup.cfg, setup.model, shape);
    if (!made) return made.err();
    ep = std::move(*made);
    return ok_status();
  }

  status use_version(uint64_t version) {
    if (version == loaded) return ok_status();
    if (version == 0) {
      if (auto st = ep->reset_to_init(); !st) return st;
    } else {
      auto bytes = setup.read_version(version);
      if (!bytes) return bytes.err();
      if (auto st = ep->load(**bytes); !st) return st;
    }
    loaded = version;
    return ok_status();
  }

  // One round among every member: each one's contribution, in member order.
  result<std::vector<nlohmann::json>> round(const nlohmann::json& mine, int64_t timeout_ms) {
    const auto bytes = nlohmann::json::to_cbor(mine);
    auto all = all_members_allgather(group, std::string(bytes.begin(), bytes.end()), timeout_ms);
    if (!all) return all.err();
    std::vector<nlohmann::json> out;
    for (const auto& b : *all) {
      auto j = nlohmann::json::from_cbor(b, true, false);
      if (j.is_discarded())
        return error{errc::malformed_message, "rollout group round: an undecodable contribution"};
      out.push_back(std::move(j));
    }
    return out;
  }

  // After a generate, each follower's contribution ({"parts": its ranks' rows, "drain_by"})
  // to every member on the fabric (ep_policy_group::members_allgather), not through the
  // coordinator. Collective: every member calls it with its own contribution (member 0's is
  // empty). Every member's contribution in member order.
  result<std::vector<nlohmann::json>> exchange_rows(const nlohmann::json& mine) {
    const auto cbor = nlohmann::json::to_cbor(mine);
    auto all = ep->members_allgather(std::string(cbor.begin(), cbor.end()),
                                     static_cast<int>(group.num_members()));
    if (!all) return all.err();
    std::vector<nlohmann::json> out;
    for (size_t m = 0; m < all->size(); ++m) {
      auto j = nlohmann::json::from_cbor((*all)[m], true, false);
      if (j.is_discarded())
        return error{errc::malformed_message,
                     "member " + std::to_string(m) + "'s rows did not decode"};
      out.push_back(std::move(j));
    }
    return out;
  }

  // This member's ranks' rows of a generate command: [[rank, completions, logprobs], ...].
  result<nlohmann::json> generate(const nlohmann::json& cmd,
                                  std::vector<policy::generation>* parts) {
    try {
      if (auto st = use_version(cmd.at("version").get<uint64_t>()); !st) return st.err();
      const auto prompts = cmd.at("prompts").get<std::vector<std::vector<policy::token_id>>>();
      const int rows_per_prompt = cmd.at("rows").get<int>();
      if (prompts.empty() || rows_per_prompt < 1 ||
          static_cast<int>(prompts.size()) > std::max(setup.max_prompts_per_generate, 1))
        return error{errc::malformed_message,
                     "rollout group command: " + std::to_string(prompts.size()) + " prompts of " +
                         std::to_string(rows_per_prompt) + " rows (at most " +
                         std::to_string(setup.max_prompts_per_generate) + " prompts per command)"};
      std::vector<std::vector<policy::token_id>> rows;
      for (const auto& p : prompts)
        rows.insert(rows.end(), static_cast<size_t>(rows_per_prompt), p);
      auto got =
          ep->generate_parts(rows, cmd.at("max_new").get<int>(), cmd.at("temperature").get<float>(),
                             cmd.at("seed").get<uint64_t>());
      if (!got) return got.err();
      nlohmann::json mine = nlohmann::json::array();
      for (int r = ep->first_local_rank(); r < ep->first_local_rank() + ep->num_local_ranks(); ++r)
        mine.push_back({r, (*got)[r].completions, (*got)[r].logprobs});
      if (parts) *parts = std::move(*got);
      return mine;
    } catch (const nlohmann::json::exception& e) {
      return error{errc::malformed_message, std::string("rollout group command: ") + e.what()};
    }
  }
};

}  // namespace

struct rollout_group_leader::state {
  explicit state(const rollout_group_setup& s, actors::trainer_group& g) : share(s, g) {}
  member_share share;
};

rollout_group_leader::rollout_group_leader(std::unique_ptr<state> s) : s_(std::move(s)) {}

rollout_group_leader::~rollout_group_leader() {
  // The members leave serve and tear their ranks down with ours (a barrier among the ranks);
  // a broken group's members are failing on their own.
  // The leader ends the incarnation (the members wait for it, so the re-formation's cause is
  // this one), before its ranks leave the fabric group.
  if (!broken_ && command("stop")) {
    s_->share.group.report_failure(drain_member_ > 0
                                       ? "member " + std::to_string(drain_member_) +
                                             " drains: the group drained and dissolves"
                                       : "its leader stopped the group");
  }
  s_->share.ep.reset();
}

result<std::unique_ptr<rollout_group_leader>> rollout_group_leader::create(
    const rollout_group_setup& s, actors::trainer_group& group) {
  if (group.member_index() != 0)
    return error{errc::internal, "rollout_group_leader: only member 0 leads"};
  auto st = std::make_unique<state>(s, group);
  if (auto started = st->share.start(); !started) return started.err();
  return std::unique_ptr<rollout_group_leader>(new rollout_group_leader(std::move(st)));
}

namespace {

// The followers' drain deadlines in a round's contributions: the earliest (0 for none), and
// the member that told it.
void take_drains(const std::vector<nlohmann::json>& all, int64_t& earliest, int& member) {
  for (size_t m = 1; m < all.size(); ++m) {
    const int64_t d = all[m].is_object() ? all[m].value("drain_by", int64_t{0}) : 0;
    if (d > 0 && (earliest == 0 || d < earliest)) {
      earliest = d;
      member = static_cast<int>(m);
    }
  }
}

}  // namespace

result<policy::generation> rollout_group_leader::generate(
    const std::vector<std::vector<policy::token_id>>& prompts, int rows_per_prompt, int max_new,
    float temperature, uint64_t seed, uint64_t version) {
  auto& m = s_->share;
  auto fail = [this](const error& e) {
    broken_ = true;
    return e;
  };
  if (broken_) return error{errc::peer_dead, "the rollout group broke earlier"};
  const int num_rows = static_cast<int>(prompts.size()) * rows_per_prompt;
  const nlohmann::json cmd{{"op", "generate"},   {"version", version},
                           {"prompts", prompts}, {"rows", rows_per_prompt},
                           {"max_new", max_new}, {"temperature", temperature},
                           {"seed", seed}};
  auto sent = m.round(cmd, m.op_timeout_ms);
  if (!sent) return fail(error{sent.err().code, "rollout group command: " + sent.err().message});
  take_drains(*sent, drain_by_, drain_member_);
  std::vector<policy::generation> parts;
  auto mine = m.generate(cmd, &parts);
  if (!mine) {
    m.group.report_failure("rollout group leader: " + mine.err().message);
    return fail(mine.err());
  }
  // The followers' rows (they finished the same decode steps as ours), on the fabric.
  auto answers = m.exchange_rows(nlohmann::json::object());
  if (!answers) {
    m.group.report_failure("rollout group leader: rows: " + answers.err().message);
    return fail(error{answers.err().code, "rollout group rows: " + answers.err().message});
  }
  take_drains(*answers, drain_by_, drain_member_);
  try {
    for (size_t k = 1; k < answers->size(); ++k) {
      const auto& a = (*answers)[k];
      if (a.contains("error"))
        return fail(error{errc::peer_dead, "rollout group member " + std::to_string(k) + ": " +
                                               a["error"].get<std::string>()});
      for (const auto& part : a.at("parts")) {
        const int r = part.at(0).get<int>();
        if (r < 0 || r >= static_cast<int>(parts.size()))
          return fail(error{errc::malformed_message, "rollout group member " + std::to_string(k) +
                                                         " sent rank " + std::to_string(r) +
                                                         "'s rows"});
        parts[r].completions = part.at(1).get<std::vector<std::vector<policy::token_id>>>();
        parts[r].logprobs = part.at(2).get<std::vector<std::vector<float>>>();
      }
    }
  } catch (const nlohmann::json::exception& e) {
    return fail(error{errc::malformed_message, std::string("rollout group rows: ") + e.what()});
  }
  policy::generation out = rows_in_order(std::move(parts));
  if (static_cast<int>(out.completions.size()) != num_rows)
    return fail(error{errc::internal, "rollout group: " + std::to_string(out.completions.size()) +
                                          " rows came back for " + std::to_string(num_rows)});
  return out;
}

status rollout_group_leader::command(const std::string& op) {
  auto all = s_->share.round({{"op", op}}, s_->share.op_timeout_ms);
  if (!all) {
    broken_ = true;
    return error{all.err().code, "rollout group command " + op + ": " + all.err().message};
  }
  take_drains(*all, drain_by_, drain_member_);
  return ok_status();
}

status rollout_group_leader::ping() {
  if (broken_) return error{errc::peer_dead, "the rollout group broke earlier"};
  return command("ping");
}

status serve_rollout_group_member(const rollout_group_setup& s, actors::trainer_group& group) {
  if (group.member_index() == 0)
    return error{errc::internal, "serve_rollout_group_member: member 0 leads"};
  member_share m(s, group);
  if (auto st = m.start(); !st) return st;
  for (;;) {
    auto r = m.round({{"drain_by", group.drain_by_unix_ms()}}, kCommandWaitMs);
    if (!r) return r.err();
    const auto& cmd = (*r)[0];
    const std::string op = cmd.is_object() ? cmd.value("op", "") : "";
    if (op == "stop") return ok_status();
    if (op == "ping") continue;
    if (op != "generate")
      return error{errc::malformed_message, "rollout group: unknown command '" + op + "'"};
    auto mine = m.generate(cmd, nullptr);
    if (!mine) {  // the leader's fabric waits fail too: end the incarnation, don't let it wait
      group.report_failure("rollout group member " + std::to_string(group.member_index()) + ": " +
                           mine.err().message);
      return mine.err();
    }
    auto answered = m.exchange_rows({{"parts", *mine}, {"drain_by", group.drain_by_unix_ms()}});
    if (!answered) {
      group.report_failure("rollout group member " + std::to_string(group.member_index()) +
                           ": rows: " + answered.err().message);
      return answered.err();
    }
  }
}

}  // namespace moerl::job
