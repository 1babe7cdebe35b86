# moerl_add_test(<name> SOURCES <files...> LIBS <targets...> [LABELS <labels...>] [TIMEOUT s]
#                [INTERNALS <libraries...>])
# INTERNALS: the libraries whose private headers (<folder>/internal/) the test reads.
# MOERL_TEST_CODE is defined for tests only: tests/support/ headers refuse anything else, so
# production code (benches linked into `moerl` included) never includes tests/.
# One executable and one CTest entry per test file, as CAF registers each *.test.cpp. The
# name starts with the test's folder (tests/ledger -> ledger_...), so `ctest -R ^ledger_`
# runs one component's tests.
function(moerl_add_test name)
  cmake_parse_arguments(T "" "TIMEOUT" "SOURCES;LIBS;LABELS;INTERNALS" ${ARGN})
  add_executable(${name} ${T_SOURCES})
  target_compile_definitions(${name} PRIVATE MOERL_TEST_CODE)
  foreach(lib IN LISTS T_INTERNALS)
    target_compile_definitions(${name} PRIVATE MOERL_INSIDE_${lib})
  endforeach()
  target_link_libraries(${name} PRIVATE ${T_LIBS} GTest::gtest GTest::gtest_main)
  target_include_directories(${name} PRIVATE ${PROJECT_SOURCE_DIR})
  moerl_target_options(${name})
  set_target_properties(${name} PROPERTIES RUNTIME_OUTPUT_DIRECTORY ${CMAKE_BINARY_DIR}/tests)
  add_test(NAME ${name} COMMAND ${name} --gtest_color=no)
  if(NOT T_TIMEOUT)
    set(T_TIMEOUT 300)
  endif()
  set_tests_properties(${name} PROPERTIES TIMEOUT ${T_TIMEOUT})
  if(T_LABELS)
    set_tests_properties(${name} PROPERTIES LABELS "${T_LABELS}")
  endif()
endfunction()
