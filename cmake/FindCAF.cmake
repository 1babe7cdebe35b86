# Debian's libcaf-dev (0.17.6) ships no CMake package. This module creates the
# imported targets CAF::core, CAF::io and CAF::openssl that CAF >= 0.18 exports
# itself, so moving past 0.17 only means deleting this file.
find_path(CAF_INCLUDE_DIR caf/all.hpp)
if(CAF_INCLUDE_DIR AND EXISTS "${CAF_INCLUDE_DIR}/caf/config.hpp")
  file(STRINGS "${CAF_INCLUDE_DIR}/caf/config.hpp" _caf_version_line
       REGEX "^#define CAF_VERSION [0-9]+")
  string(REGEX MATCH "[0-9]+" _caf_v "${_caf_version_line}")
  math(EXPR _caf_major "${_caf_v} / 10000")
  math(EXPR _caf_minor "(${_caf_v} / 100) % 100")
  math(EXPR _caf_patch "${_caf_v} % 100")
  set(CAF_VERSION "${_caf_major}.${_caf_minor}.${_caf_patch}")
endif()

set(_caf_libs)
foreach(comp IN LISTS CAF_FIND_COMPONENTS)
  find_library(CAF_${comp}_LIBRARY NAMES caf_${comp})
  if(CAF_${comp}_LIBRARY)
    set(CAF_${comp}_FOUND TRUE)
    list(APPEND _caf_libs CAF_${comp}_LIBRARY)
  endif()
endforeach()

include(FindPackageHandleStandardArgs)
find_package_handle_standard_args(CAF
  REQUIRED_VARS CAF_INCLUDE_DIR ${_caf_libs}
  VERSION_VAR CAF_VERSION
  HANDLE_COMPONENTS)

if(CAF_FOUND)
  find_package(Threads REQUIRED)
  foreach(comp IN LISTS CAF_FIND_COMPONENTS)
    if(CAF_${comp}_FOUND AND NOT TARGET CAF::${comp})
      add_library(CAF::${comp} UNKNOWN IMPORTED)
      set_target_properties(CAF::${comp} PROPERTIES
        IMPORTED_LOCATION "${CAF_${comp}_LIBRARY}"
        INTERFACE_INCLUDE_DIRECTORIES "${CAF_INCLUDE_DIR}"
        INTERFACE_LINK_LIBRARIES Threads::Threads)
    endif()
  endforeach()
  if(TARGET CAF::io)
    set_property(TARGET CAF::io APPEND PROPERTY INTERFACE_LINK_LIBRARIES CAF::core)
  endif()
  if(TARGET CAF::openssl)
    find_package(OpenSSL REQUIRED)
    set_property(TARGET CAF::openssl APPEND PROPERTY INTERFACE_LINK_LIBRARIES
                 CAF::io OpenSSL::SSL OpenSSL::Crypto)
  endif()
endif()
