# How moerl's C++ targets compile faster: what `scripts/quickstart.sh up` waits for on a bare
# 2-core machine is mostly the `moerl` target's ~250 translation units (docs/GUIDE.md, "Build
# time", has the figures). Two levers, each with an option to turn it off (a build without
# them is the same program):
#
# MOERL_UNITY_BUILD: unity builds for the CAF-heavy targets. CAF's message and behavior
#   templates are instantiated and optimised again in every source that uses them (more than
#   half of such a source's compile time is code generation, not parsing); compiling a few
#   sources as one emits each instantiation once. Sources of a unity target must not define
#   the same file-local (anonymous-namespace or static) name twice.
#
# MOERL_PCH: a precompiled header of CAF (and nlohmann json, spdlog, the standard library) for
#   the same targets: compiled ONCE in an anchor target (moerl_pch_caf) and reused (REUSE_FROM).
#   GCC accepts a PCH in a source whose -D flags differ when the PCH does not use them
#   (MOERL_INSIDE_<library>), but not across -fPIC/-fPIE, so only libraries reuse it. CMake
#   adds -Winvalid-pch, an error under MOERL_WERROR: a PCH that stopped matching fails the
#   build instead of silently costing the time again. Measured on 5 Dec, a json/spdlog PCH for
#   the other libraries (and one for the `moerl` executable) saved ~1 s in some sources and cost
#   as much in others: no gain, so they have none. The CUDA library never sees the C++ PCH.
#
# ccache caches a source compiled with a PCH only with its sloppiness set; the launcher sets it
# (the top-level CMakeLists.txt), so every way of building (scripts/build.sh, cmake --build, CI)
# gets it.
option(MOERL_PCH "Precompile CAF's headers once for the CAF-heavy libraries" ON)
option(MOERL_UNITY_BUILD "Compile the CAF-heavy targets as unity builds" ON)

# The PCH's headers: CAF plus what the CAF-heavy sources include most.
set(MOERL_PCH_CAF <algorithm> <atomic> <chrono> <cstdint> <cstring> <functional> <map> <memory>
    <mutex> <optional> <set> <sstream> <string> <thread> <vector> <nlohmann/json.hpp>
    <spdlog/spdlog.h> <caf/all.hpp> <caf/io/all.hpp>)
set(MOERL_PCH_CAF_TARGETS moerl_actors)
# Unity builds, in batches of this many sources.
set(MOERL_UNITY_TARGETS moerl_actors moerl)
set(MOERL_UNITY_BATCH_SIZE 4)

if(MOERL_PCH)
  add_library(moerl_pch_caf OBJECT ${PROJECT_SOURCE_DIR}/cmake/pch_anchor.cpp)
  target_link_libraries(moerl_pch_caf PRIVATE nlohmann_json::nlohmann_json spdlog::spdlog
                        CAF::core CAF::io)
  target_precompile_headers(moerl_pch_caf PRIVATE ${MOERL_PCH_CAF})
  moerl_target_options(moerl_pch_caf)
endif()

function(moerl_build_speed target)
  get_target_property(_type ${target} TYPE)
  if(MOERL_PCH AND target IN_LIST MOERL_PCH_CAF_TARGETS AND NOT _type STREQUAL "EXECUTABLE")
    target_precompile_headers(${target} REUSE_FROM moerl_pch_caf)
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
