#include "common/health_file.h"
#include "common/json_text.h"

#include <cstdio>
#include <fstream>
#include <sstream>

#include <nlohmann/json.hpp>

namespace moerl {

status write_health(const std::string& path, const health_record& r) {
  const nlohmann::json j{{"node", r.node},
                         {"role", r.role},
                         {"pid", r.pid},
                         {"state", r.state},
                         {"written_unix_ms", r.written_unix_ms},
                         {"accepted_unix_ms", r.accepted_unix_ms}};
  const std::string tmp = path + ".tmp";
  {
    std::ofstream out(tmp, std::ios::trunc);
    out << json_text(j) << "\n";
    if (!out.flush()) return error(errc::io_error, "cannot write the health file " + tmp);
  }
  if (std::rename(tmp.c_str(), path.c_str()) != 0)
    return error(errc::io_error, "cannot rename " + tmp + " to " + path);
  return ok_status();
}

result<health_record> read_health(const std::string& path) {
  std::ifstream in(path);
  if (!in) return error(errc::not_found, "no health file " + path + " (the node never wrote one)");
  std::stringstream text;
  text << in.rdbuf();
  auto j = nlohmann::json::parse(text.str(), nullptr, false);
  auto bad = [&](const std::string& why) {
    return error(errc::invalid_argument, "health file " + path + ": " + why);
  };
  if (!j.is_object()) return bad("not a JSON object");
  health_record r;
  try {
    r.node = j.at("node").get<std::string>();
    r.role = j.at("role").get<std::string>();
    r.pid = j.at("pid").get<int64_t>();
    r.state = j.at("state").get<std::string>();
    r.written_unix_ms = j.at("written_unix_ms").get<int64_t>();
    r.accepted_unix_ms = j.at("accepted_unix_ms").get<int64_t>();
  } catch (const nlohmann::json::exception& e) {
    return bad(e.what());
  }
  return r;
}

std::string probe_failure(const health_record& r, probe_kind kind, int64_t now_unix_ms,
                          int64_t within_ms) {
  const std::string who = r.node + " (" + r.role + ", pid " + std::to_string(r.pid) + ")";
  const int64_t age = now_unix_ms - r.written_unix_ms;
  if (age > within_ms)
    return who + ": its agent last wrote " + std::to_string(age) + " ms ago (bound " +
           std::to_string(within_ms) + " ms): frozen or hung";
  if (r.state == "fenced") return who + ": fenced by the coordinator and still running";
  if (kind == probe_kind::live) return "";
  if (r.state != "running") return who + ": " + r.state + ", not serving";
  if (r.accepted_unix_ms == 0) return who + ": the coordinator has not accepted it yet";
  const int64_t since = now_unix_ms - r.accepted_unix_ms;
  if (since > within_ms)
    return who + ": the coordinator last accepted its heartbeat " + std::to_string(since) +
           " ms ago (bound " + std::to_string(within_ms) + " ms)";
  return "";
}

}  // namespace moerl
