# How moerl's C++ targets compile fast: what `scripts/quickstart.sh up` waits for on a bare
# 2-core machine is mostly the `moerl` target's ~250 translation units (docs/GUIDE.md has the
# figures). Two levers, each with an option to turn it off (a build without them is the same
# program):
#
# MOERL_PCH: precompiled headers. The third-party headers that most sources include (nlohmann
#   json, spdlog, the standard library; CAF for the control plane) are parsed once per build
#   instead of once per source. Each header set is compiled ONCE, in an anchor target
#   (moerl_pch_base, moerl_pch_caf), and every library of its kind reuses it (REUSE_FROM):
#   GCC accepts a PCH in a source whose -D flags differ when the PCH does not use them
#   (MOERL_INSIDE_<library>), but not across -fPIC/-fPIE, so the `moerl` executable compiles
#   its own. CMake adds -Winvalid-pch, an error under MOERL_WERROR: a PCH that stopped
#   matching fails the build instead of silently costing the time again. Libraries whose sources are
#   numeric or low-level (kernels, policy, fabric, messages, common, zmq) include neither json
#   nor spdlog: loading a 100 MB PCH would cost them more than it saves, so they have none.
#   The CUDA library is made without these functions and never sees the C++ PCH.
#
# MOERL_UNITY_BUILD: unity builds for the CAF-heavy targets. CAF's message and behavior
#   templates are instantiated and optimised again in every source that uses them (more than
#   half of such a source's compile time is code generation, not parsing); compiling a few
#   sources as one emits each instantiation once. Sources of a unity target must not define
#   the same file-local (anonymous-namespace or static) name twice.
#
# ccache keeps working with PCH when its sloppiness allows it; the launcher sets it (the
# top-level CMakeLists.txt), so every way of building (scripts/build.sh, cmake --build, CI)
# gets it.
option(MOERL_PCH "Precompile the heavy third-party headers once per build" ON)
option(MOERL_UNITY_BUILD "Compile the CAF-heavy targets as unity builds" ON)

# The header sets. Standard headers the sources include most (counted over the tree).
set(MOERL_PCH_STD <algorithm> <atomic> <chrono> <cstdint> <cstring> <functional> <map>
    <memory> <mutex> <optional> <set> <sstream> <string> <thread> <vector>)
set(MOERL_PCH_BASE ${MOERL_PCH_STD} <nlohmann/json.hpp> <spdlog/spdlog.h>)
set(MOERL_PCH_CAF ${MOERL_PCH_BASE} <caf/all.hpp> <caf/io/all.hpp>)

# Which targets get which PCH: CAF-heavy ones the CAF set, the listed low-level ones none,
# every other moerl_cc_library the base set.
set(MOERL_PCH_CAF_TARGETS moerl_actors moerl_bench_control)
set(MOERL_PCH_NONE_TARGETS moerl_kernels moerl_policy moerl_fabric moerl_messages moerl_common
    moerl_zmq)
# Executables of one source gain nothing from a PCH of their own; `moerl` (apps/) has ~17.
set(MOERL_PCH_BINARIES moerl)
# Unity builds: the targets whose sources are CAF-heavy, in batches of this many sources.
set(MOERL_UNITY_TARGETS moerl_actors)
set(MOERL_UNITY_BATCH_SIZE 4)

if(MOERL_PCH)
  foreach(kind base caf)
    string(TOUPPER ${kind} _kind)
    add_library(moerl_pch_${kind} OBJECT ${PROJECT_SOURCE_DIR}/cmake/pch_anchor.cpp)
    target_link_libraries(moerl_pch_${kind} PRIVATE nlohmann_json::nlohmann_json spdlog::spdlog)
    if(kind STREQUAL caf)
      target_link_libraries(moerl_pch_${kind} PRIVATE CAF::core CAF::io)
    endif()
    target_precompile_headers(moerl_pch_${kind} PRIVATE ${MOERL_PCH_${_kind}})
    moerl_target_options(moerl_pch_${kind})
  endforeach()
endif()

function(moerl_build_speed target)
  get_target_property(_type ${target} TYPE)
  set(_reuse "")
  if(NOT MOERL_PCH)
  elseif(_type STREQUAL "EXECUTABLE")
    if(target IN_LIST MOERL_PCH_BINARIES)
      target_precompile_headers(${target} PRIVATE ${MOERL_PCH_BASE})
    endif()
  elseif(target IN_LIST MOERL_PCH_CAF_TARGETS)
    set(_reuse moerl_pch_caf)
  elseif(NOT target IN_LIST MOERL_PCH_NONE_TARGETS)
    set(_reuse moerl_pch_base)
  endif()
  if(_reuse)
    target_precompile_headers(${target} REUSE_FROM ${_reuse})
    # The PCH holds spdlog's headers as compiled with spdlog's definitions
    # (SPDLOG_FMT_EXTERNAL, ...): a target that does not link spdlog itself must compile with
    # them too, or GCC refuses the PCH.
    target_compile_definitions(${target} PRIVATE
      $<TARGET_PROPERTY:spdlog::spdlog,INTERFACE_COMPILE_DEFINITIONS>)
  endif()
  if(MOERL_UNITY_BUILD AND target IN_LIST MOERL_UNITY_TARGETS)
    set_target_properties(${target} PROPERTIES UNITY_BUILD ON
                          UNITY_BUILD_BATCH_SIZE ${MOERL_UNITY_BATCH_SIZE})
  endif()
endfunction()
