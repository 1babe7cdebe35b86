# Every third-party dependency is found here, once, from Debian's packages.
find_package(Threads REQUIRED)
find_package(PkgConfig REQUIRED)
find_package(CAF 0.17.6 EXACT REQUIRED COMPONENTS core io openssl)
find_package(CapnProto CONFIG REQUIRED)
find_package(spdlog CONFIG REQUIRED)
find_package(yaml-cpp CONFIG REQUIRED)
find_package(CLI11 CONFIG REQUIRED)
find_package(nlohmann_json CONFIG REQUIRED)
# Debian ships cpp-httplib as a compiled library with a .pc file only.
pkg_check_modules(HTTPLIB REQUIRED IMPORTED_TARGET cpp-httplib)
find_package(CURL REQUIRED)
find_package(OpenSSL REQUIRED)
find_package(GTest CONFIG REQUIRED)

pkg_check_modules(LIBFABRIC REQUIRED IMPORTED_TARGET libfabric)
# libfabric's headers only: the library itself is opened at first use
# (fabric/libfabric_on_demand.cpp, common/on_demand_library.h).
add_library(moerl_libfabric_headers INTERFACE)
target_include_directories(moerl_libfabric_headers INTERFACE ${LIBFABRIC_INCLUDE_DIRS})
pkg_check_modules(ZMQ REQUIRED IMPORTED_TARGET libzmq)
find_path(CPPZMQ_INCLUDE_DIR zmq.hpp REQUIRED)
# XXH3, header-only (policy/params.cpp's content hash; libxxhash-dev).
find_path(XXHASH_INCLUDE_DIR xxhash.h REQUIRED)

# CPU GEMM: OpenBLAS through its CBLAS interface.
pkg_check_modules(OPENBLAS REQUIRED IMPORTED_TARGET openblas)
