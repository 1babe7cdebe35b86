# One place that says how a moerl target is built: its include root, its warnings and the
# language standard come from here, so no CMakeLists.txt repeats them (in the spirit of
# abseil's absl_cc_library).
#
#   moerl_cc_library(<name> SOURCES <files...> [DEPS <public deps...>]
#                    [PRIVATE_DEPS <private deps...>] [INCLUDES <extra public include dirs...>])
#   moerl_cc_binary(<name> SOURCES <files...> [DEPS <deps...>])
#   moerl_cuda_library(<name> SOURCES <.cu...> DEPS <deps...>)   # CUDA twins (MOERL_HAVE_CUDA)
#   moerl_target_options(<target>)   # for targets made otherwise (tests)
#
# Build speed (a translation unit that includes CAF takes ~20-25 s on the 2-core machines):
# moerl_cc_library/moerl_cc_binary give their targets a precompiled header and, for the
# CAF-heavy ones, a unity build; cmake/MoerlBuildSpeed.cmake says which and why.
#
# Warnings: -Wall -Wextra on every C++ target; MOERL_WERROR turns them into errors (the test
# command builds with it on, so CI fails on a new warning).
#
# Private headers: a library's headers under <folder>/internal/ are its own. Each starts with
#   #ifndef MOERL_INSIDE_<library>
#   #error "<path> is private to <library>: ..."
#   #endif
# and moerl_cc_library defines MOERL_INSIDE_<name> for its own sources only, so another target
# that includes one fails to compile, naming the header: the compiler keeps the layering, not
# a comment. White-box tests say which internals they read (moerl_add_test ... INTERNALS).

function(moerl_target_options target)
  target_compile_options(${target} PRIVATE
    $<$<COMPILE_LANGUAGE:CXX>:-Wall -Wextra>
    $<$<AND:$<COMPILE_LANGUAGE:CXX>,$<BOOL:${MOERL_WERROR}>>:-Werror>)
endfunction()

function(moerl_cc_library name)
  cmake_parse_arguments(L "" "" "SOURCES;DEPS;PRIVATE_DEPS;INCLUDES" ${ARGN})
  if(L_UNPARSED_ARGUMENTS)
    message(FATAL_ERROR "moerl_cc_library(${name}): unknown arguments ${L_UNPARSED_ARGUMENTS}")
  endif()
  add_library(${name} STATIC ${L_SOURCES})
  target_compile_definitions(${name} PRIVATE MOERL_INSIDE_${name})
  target_include_directories(${name} PUBLIC ${PROJECT_SOURCE_DIR} ${L_INCLUDES})
  target_link_libraries(${name} PUBLIC ${L_DEPS} PRIVATE ${L_PRIVATE_DEPS})
  moerl_target_options(${name})
  moerl_build_speed(${name})
endfunction()

function(moerl_cc_binary name)
  cmake_parse_arguments(B "" "" "SOURCES;DEPS" ${ARGN})
  if(B_UNPARSED_ARGUMENTS)
    message(FATAL_ERROR "moerl_cc_binary(${name}): unknown arguments ${B_UNPARSED_ARGUMENTS}")
  endif()
  add_executable(${name} ${B_SOURCES})
  target_include_directories(${name} PRIVATE ${PROJECT_SOURCE_DIR})
  target_link_libraries(${name} PRIVATE ${B_DEPS})
  moerl_target_options(${name})
  moerl_build_speed(${name})
endfunction()

# moerl_cuda_library(<name> SOURCES <.cu files...> DEPS <public deps...> [CUDA_OPTIONS <flags...>])
# A library of CUDA twins (kernels/cuda, policy/cuda), called only when MOERL_HAVE_CUDA: a
# separate static library so CPU-only consumers never link cudart. Its users see
# MOERL_HAVE_CUDA; its own sources see MOERL_INSIDE_<name> (private headers).
function(moerl_cuda_library name)
  cmake_parse_arguments(L "" "" "SOURCES;DEPS;CUDA_OPTIONS" ${ARGN})
  if(L_UNPARSED_ARGUMENTS)
    message(FATAL_ERROR "moerl_cuda_library(${name}): unknown arguments ${L_UNPARSED_ARGUMENTS}")
  endif()
  add_library(${name} STATIC ${L_SOURCES})
  target_include_directories(${name} PUBLIC ${PROJECT_SOURCE_DIR})
  moerl_target_options(${name})
  # moerl_target_options warns on C++ sources only; the .cu files' host code gets the same
  # warnings through nvcc, so the CUDA build has zero warnings too.
  target_compile_options(${name} PRIVATE
    $<$<COMPILE_LANGUAGE:CUDA>:-Xcompiler=-Wall,-Wextra>
    $<$<AND:$<COMPILE_LANGUAGE:CUDA>,$<BOOL:${MOERL_WERROR}>>:-Xcompiler=-Werror>
    $<$<COMPILE_LANGUAGE:CUDA>:${L_CUDA_OPTIONS}>)
  # cuBLAS is not linked: kernels/cuda/cublas_on_demand.cpp opens it at first use.
  target_link_libraries(${name} PUBLIC ${L_DEPS} CUDA::cudart)
  target_compile_definitions(${name} PUBLIC MOERL_HAVE_CUDA PRIVATE MOERL_INSIDE_${name})
  set_target_properties(${name} PROPERTIES CUDA_SEPARABLE_COMPILATION OFF)
endfunction()

# After moerl_target_options: the PCH anchor targets use it.
include(MoerlBuildSpeed)
