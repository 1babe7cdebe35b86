#include "provenance/provenance.h"

#include <fstream>
#include <thread>

#include <unistd.h>

#include <capnp/common.h>
#include <cblas.h>
#include <spdlog/version.h>
#include <zmq.h>
#include <caf/config.hpp>

#include "fabric/provider_info.h"
#include "moerl_commit.h"  // generated at build time: MOERL_GIT_COMMIT
#include "provenance/internal/gpu_info.h"

#ifndef MOERL_BUILD_TYPE
#define MOERL_BUILD_TYPE "unknown"
#endif
#ifndef MOERL_VERSION
#define MOERL_VERSION "0.0.0"
#endif

namespace moerl {
namespace {

std::string compiler_string() {
#if defined(__clang__)
  return "clang " __clang_version__;
#elif defined(__GNUC__)
  return "gcc " + std::to_string(__GNUC__) + "." + std::to_string(__GNUC_MINOR__) + "." +
         std::to_string(__GNUC_PATCHLEVEL__);
#else
  return "unknown";
#endif
}

nlohmann::json libfabric_json() {
  nlohmann::json j;
  j["version"] = fabric::libfabric_runtime_version();
  j["providers"] = nlohmann::json::array();
  auto providers = fabric::list_rdm_providers();
  if (!providers) {
    j["error"] = providers.err().to_string();
    return j;
  }
  for (const auto& p : *providers) {
    j["providers"].push_back({{"name", p.name},
                              {"rma", p.rma},
                              {"msg", p.msg},
                              {"cq_data_size", p.cq_data_size},
                              {"msg_order", p.msg_order},
                              {"mr_mode", p.mr_mode}});
  }
  return j;
}

}  // namespace

nlohmann::json collect_provenance() {
  nlohmann::json j;
  j["version"] = MOERL_VERSION;
  j["commit"] = MOERL_GIT_COMMIT;
  j["compiler"] = compiler_string();
  j["build_type"] = MOERL_BUILD_TYPE;
  j["caf"] = std::to_string(CAF_VERSION / 10000) + "." + std::to_string((CAF_VERSION / 100) % 100) +
             "." + std::to_string(CAF_VERSION % 100);
  j["libfabric"] = libfabric_json();
  int zmaj = 0, zmin = 0, zpat = 0;
  zmq_version(&zmaj, &zmin, &zpat);
  j["zeromq"] = std::to_string(zmaj) + "." + std::to_string(zmin) + "." + std::to_string(zpat);
  j["capnp"] = std::to_string(CAPNP_VERSION_MAJOR) + "." + std::to_string(CAPNP_VERSION_MINOR) +
               "." + std::to_string(CAPNP_VERSION_MICRO);
  j["spdlog"] = std::to_string(SPDLOG_VER_MAJOR) + "." + std::to_string(SPDLOG_VER_MINOR) + "." +
                std::to_string(SPDLOG_VER_PATCH);
  const gpu_report gpu = probe_gpu();
  j["cuda"] = gpu.cuda;
  j["nccl"] = gpu.nccl;
  j["gpu"] = gpu.gpu;
  j["blas"] = std::string("OpenBLAS ") + openblas_get_config() +
              " threads=" + std::to_string(openblas_get_num_threads());
  char host[256] = {0};
  gethostname(host, sizeof(host) - 1);
  j["host"] = {{"hostname", host}, {"cpus", std::thread::hardware_concurrency()}};
  return j;
}

std::vector<double> host_load_average() {
  std::ifstream f("/proc/loadavg");
  double a = 0, b = 0, c = 0;
  f >> a >> b >> c;
  return {a, b, c};
}

}  // namespace moerl
