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

# hap_add_child_directories(): add_subdirectory for every child folder of the current one that
# has a CMakeLists.txt (tests/ and bench/: one folder per component).
function(hap_add_child_directories)
  file(GLOB _children LIST_DIRECTORIES true CONFIGURE_DEPENDS ${CMAKE_CURRENT_SOURCE_DIR}/*)
  foreach(_child ${_children})
    if(IS_DIRECTORY ${_child} AND EXISTS ${_child}/CMakeLists.txt)
      add_subdirectory(${_child})
    endif()
  endforeach()
endfunction()

# hap_grpc_protoc(SRCS_VAR ROOT COMMENT PROTO ...): one protoc run that writes the messages and
# the gRPC service code of the PROTOs (paths below ROOT) into ${CMAKE_CURRENT_BINARY_DIR}/gen,
# and sets SRCS_VAR to the generated files. One run, because two protobuf_generate() calls for
# the same files race under -j and corrupt the outputs.
function(hap_grpc_protoc srcs_var root comment)
  set(_out ${CMAKE_CURRENT_BINARY_DIR}/gen)
  set(_srcs)
  set(_abs)
  foreach(_p ${ARGN})
    string(REGEX REPLACE "\\.proto$" "" _stem ${_p})
    list(APPEND _srcs ${_out}/${_stem}.pb.cc ${_out}/${_stem}.pb.h ${_out}/${_stem}.grpc.pb.cc
         ${_out}/${_stem}.grpc.pb.h)
    list(APPEND _abs ${root}/${_p})
  endforeach()
  add_custom_command(
    OUTPUT ${_srcs}
    COMMAND ${CMAKE_COMMAND} -E make_directory ${_out}
    COMMAND protobuf::protoc --proto_path=${root} --cpp_out=${_out} --grpc_out=${_out}
            --plugin=protoc-gen-grpc=$<TARGET_FILE:gRPC::grpc_cpp_plugin> ${ARGN}
    WORKING_DIRECTORY ${root}
    DEPENDS ${_abs} protobuf::protoc gRPC::grpc_cpp_plugin
    COMMENT "${comment}"
    VERBATIM)
  set(${srcs_var} ${_srcs} PARENT_SCOPE)
endfunction()

# hap_tool_script_test(NAME SCRIPT TOOL WORK_DIR TIMEOUT [SKIP_RETURN_CODE CODE]): a unit test
# that runs the Python SCRIPT beside this CMakeLists.txt as
# `SCRIPT <TOOL's path> <source dir> <this build dir>/WORK_DIR`: it checks TOOL against a
# reference. With SKIP_RETURN_CODE, that exit code reports the test as skipped.
function(hap_tool_script_test name script tool work_dir timeout)
  cmake_parse_arguments(ARG "" "SKIP_RETURN_CODE" "" ${ARGN})
  add_test(NAME ${name}
           COMMAND /usr/bin/python3 ${CMAKE_CURRENT_SOURCE_DIR}/${script} $<TARGET_FILE:${tool}>
                   ${PROJECT_SOURCE_DIR} ${CMAKE_CURRENT_BINARY_DIR}/${work_dir})
  set_tests_properties(${name} PROPERTIES LABELS unit TIMEOUT ${timeout})
  if(DEFINED ARG_SKIP_RETURN_CODE)
    set_tests_properties(${name} PROPERTIES SKIP_RETURN_CODE ${ARG_SKIP_RETURN_CODE})
  endif()
endfunction()
