// Starts tests/store/moto_s3_server.py (moto's S3 server with IAM authentication on) as a
// child process and reads its endpoint and credentials. The child serves until this
// object closes its stdin, and also exits when the test process dies.
#pragma once

#include <sys/types.h>

#include <memory>
#include <string>
#include <vector>

#include "common/error.h"

namespace moerl::store::testing {

struct moto_info {
  std::string endpoint;  // http://127.0.0.1:<port>
  std::string region;
  std::string bucket;
  std::string access_key_id;
  std::string secret_access_key;
};

// True when the test python (/usr/bin/python3, or MOERL_TEST_PYTHON) has moto and boto3.
bool python_has_moto();

// True when MOERL_REQUIRE_S3_TESTS is set (not empty, not "0"), as CI sets it: a missing moto
// then fails the S3 tests instead of skipping them.
bool s3_tests_required();

// Where the server runs: by default on loopback beside the caller. `moerl bench weights`'
// store_s3_netns puts it on a network namespace's "host" (sims/netns_switch.h): prefix
// {"ip", "netns", "exec", NS} (which execs, so the child is still the server and its stdin
// still the pipe) and host that namespace's address.
struct moto_placement {
  std::string host = "127.0.0.1";
  std::vector<std::string> prefix;
};

class moto_server {
 public:
  // Waits up to `timeout_ms` for the server's JSON line; the error carries its stderr.
  static result<std::unique_ptr<moto_server>> start(const std::string& script, int timeout_ms,
                                                    const moto_placement& where = {});
  ~moto_server();
  const moto_info& info() const { return info_; }
  // The server's process (a test freezes it with SIGSTOP to make the store unreachable).
  pid_t pid() const { return pid_; }

 private:
  moto_server() = default;
  pid_t pid_ = -1;
  int stdin_fd_ = -1;
  std::string stderr_path_;
  moto_info info_;
};

// Sets AWS_ACCESS_KEY_ID / AWS_SECRET_ACCESS_KEY to the server's credentials (what the S3
// store reads).
void export_credentials(const moto_info& info);

}  // namespace moerl::store::testing

// In a test body: without moto, skips (or fails where s3_tests_required()).
#define MOERL_SKIP_TEST_WITHOUT_MOTO()                                                            \
  do {                                                                                            \
    if (!::moerl::store::testing::python_has_moto()) {                                            \
      if (::moerl::store::testing::s3_tests_required())                                           \
        FAIL() << "MOERL_REQUIRE_S3_TESTS is set but /usr/bin/python3 cannot import moto";        \
      GTEST_SKIP() << "moto is not installed for /usr/bin/python3 (see scripts/install-deps.sh)"; \
    }                                                                                             \
  } while (0)
