# Helpers shared by every component's CMakeLists.txt.

# hap_library(NAME DIR [DEPS ...]): a static library of every .cc under DIR (one component
# per directory, so each directory's owner adds files without touching CMake).
function(hap_library name dir)
  cmake_parse_arguments(ARG "" "" "DEPS" ${ARGN})
  file(GLOB _srcs CONFIGURE_DEPENDS ${dir}/*.cc)
  if(_srcs)
    add_library(${name} STATIC ${_srcs})
    target_include_directories(${name} PUBLIC ${PROJECT_SOURCE_DIR})
    target_link_libraries(${name} PUBLIC ${ARG_DEPS})
  else()  # header-only so far
    add_library(${name} INTERFACE)
    target_include_directories(${name} INTERFACE ${PROJECT_SOURCE_DIR})
    target_link_libraries(${name} INTERFACE ${ARG_DEPS})
  endif()
endfunction()

# hap_test(NAME SOURCES ... [LIBS ...] [LABELS ...]): a GoogleTest binary registered with ctest.
function(hap_test name)
  cmake_parse_arguments(ARG "" "" "SOURCES;LIBS;LABELS" ${ARGN})
  add_executable(${name} ${ARG_SOURCES})
  # hap_tiny: the tiny checkpoints and tokenizers tests write (test fixtures, not in services).
  target_link_libraries(${name} PRIVATE ${ARG_LIBS} hap_tiny GTest::gtest GTest::gtest_main)
  target_compile_definitions(${name} PRIVATE HAP_SOURCE_DIR="${PROJECT_SOURCE_DIR}"
                                             HAP_BINARY_DIR="${PROJECT_BINARY_DIR}")
  if(NOT ARG_LABELS)
    set(ARG_LABELS unit)
  endif()
  add_test(NAME ${name} COMMAND ${name})
  set_tests_properties(${name} PROPERTIES LABELS "${ARG_LABELS}" TIMEOUT 600)
endfunction()
