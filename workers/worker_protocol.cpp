#include "workers/worker_protocol.h"

#include <cmath>
#include <limits>

namespace moerl::workers {

const char* refusal_name(refusal r) {
  switch (r) {
    case refusal::malformed: return "malformed";
    case refusal::bad_version: return "bad_version";
    case refusal::unknown_type: return "unknown_type";
    case refusal::stale_fencing_token: return "stale_fencing_token";
    case refusal::unknown_unit: return "unknown_unit";
    case refusal::duplicate: return "duplicate";
    case refusal::wrong_id: return "wrong_id";
    case refusal::not_rank_zero: return "not_rank_zero";
  }
  return "malformed";
}

checked check_envelope(const nlohmann::json& msg, std::initializer_list<const char*> accepted) {
  checked c;
  if (!msg.is_object()) {
    c.detail = "message is not a JSON object";
    return c;
  }
  auto v = msg.find("v");
  if (v == msg.end() || !v->is_number_integer() || v->get<int64_t>() != kProtocolVersion) {
    c.why = refusal::bad_version;
    c.detail = "\"v\" is " + (v == msg.end() ? std::string("missing") : v->dump()) + "; expected " +
               std::to_string(kProtocolVersion);
    return c;
  }
  auto t = msg.find("type");
  if (t == msg.end() || !t->is_string()) {
    c.detail = "\"type\" is missing or not a string";
    return c;
  }
  for (const char* a : accepted)
    if (*t == a) {
      c.ok = true;
      c.type = a;
      return c;
    }
  c.why = refusal::unknown_type;
  std::string names;
  for (const char* a : accepted) names += (names.empty() ? "" : ", ") + std::string(a);
  c.detail = "type " + t->dump() + " is not accepted here; expected one of: " + names;
  return c;
}

bool read_u64(const nlohmann::json& msg, const char* field, uint64_t& out, std::string& detail) {
  auto f = msg.find(field);
  if (f == msg.end() || !f->is_number_unsigned()) {
    detail = std::string("\"") + field + "\" is missing or not a non-negative integer";
    return false;
  }
  out = f->get<uint64_t>();
  return true;
}

bool read_finite(const nlohmann::json& msg, const char* field, double& out, std::string& detail) {
  auto f = msg.find(field);
  if (f == msg.end() || !f->is_number() || !std::isfinite(f->get<double>()) ||
      std::fabs(f->get<double>()) > std::numeric_limits<float>::max()) {
    detail = std::string("\"") + field + "\" is missing or not a finite float32 number";
    return false;
  }
  out = f->get<double>();
  return true;
}

bool read_u32_list(const nlohmann::json& msg, const char* field, std::vector<uint32_t>& out,
                   std::string& detail) {
  auto f = msg.find(field);
  if (f == msg.end() || !f->is_array()) {
    detail = std::string("\"") + field + "\" is missing or not a list";
    return false;
  }
  out.clear();
  out.reserve(f->size());
  for (const auto& x : *f) {
    if (!x.is_number_unsigned() || x.get<uint64_t>() > 0xffffffffull) {
      detail = std::string("\"") + field + "\" holds " + x.dump() + "; expected uint32 token ids";
      return false;
    }
    out.push_back(static_cast<uint32_t>(x.get<uint64_t>()));
  }
  return true;
}

bool read_float_list(const nlohmann::json& msg, const char* field, std::vector<float>& out,
                     std::string& detail) {
  auto f = msg.find(field);
  if (f == msg.end() || !f->is_array()) {
    detail = std::string("\"") + field + "\" is missing or not a list";
    return false;
  }
  out.clear();
  out.reserve(f->size());
  for (const auto& x : *f) {
    if (!x.is_number() || !std::isfinite(x.get<double>())) {
      detail = std::string("\"") + field + "\" holds " + x.dump() + "; expected finite floats";
      return false;
    }
    out.push_back(static_cast<float>(x.get<double>()));
  }
  return true;
}

nlohmann::json error_frame(refusal why, const std::string& detail) {
  return {{"v", kProtocolVersion},
          {"type", "error"},
          {"reason", refusal_name(why)},
          {"detail", detail}};
}

}  // namespace moerl::workers
