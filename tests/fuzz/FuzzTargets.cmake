# The libFuzzer targets (included by the top-level CMakeLists.txt when HAP_FUZZ is ON; not a
# CMakeLists.txt, so tests/CMakeLists.txt's glob leaves it out of the normal build). Each target
# is one tests/fuzz/<name>.cc defining LLVMFuzzerTestOneInput; the binaries land in
# <build>/fuzz/. `make fuzz` builds them in build-fuzz and runs each against a copy of its
# committed corpus (tests/fuzz/corpus/<name>/, dictionaries in tests/fuzz/dict/).
set(_fuzz_dir ${CMAKE_CURRENT_LIST_DIR})
set(HAP_FUZZ_TARGETS)

# hap_fuzzer(NAME LIBS ...): tests/fuzz/NAME.cc linked with libFuzzer's main.
function(hap_fuzzer name)
  cmake_parse_arguments(ARG "" "" "LIBS" ${ARGN})
  add_executable(${name} ${_fuzz_dir}/${name}.cc)
  target_link_libraries(${name} PRIVATE ${ARG_LIBS})
  target_link_options(${name} PRIVATE -fsanitize=fuzzer)
  target_compile_definitions(${name} PRIVATE HAP_SOURCE_DIR="${PROJECT_SOURCE_DIR}")
  set_target_properties(${name} PROPERTIES RUNTIME_OUTPUT_DIRECTORY ${CMAKE_BINARY_DIR}/fuzz)
  set(HAP_FUZZ_TARGETS ${HAP_FUZZ_TARGETS} ${name} PARENT_SCOPE)
endfunction()

# Checkpoint files.
hap_fuzzer(safetensors_fuzz LIBS hap_io)
hap_fuzzer(safetensors_index_fuzz LIBS hap_io hap_tiny)
hap_fuzzer(config_fuzz LIBS hap_io)
hap_fuzzer(preprocessor_config_fuzz LIBS hap_io hap_image)
# Images and text.
hap_fuzzer(image_fuzz LIBS hap_image)
hap_fuzzer(tokenizer_fuzz LIBS hap_text)
hap_fuzzer(chat_template_fuzz LIBS hap_text)
# What the services receive.
hap_fuzzer(generate_request_fuzz LIBS hap_svc_prefill)
hap_fuzzer(chat_request_fuzz LIBS hap_svc_prefill hap_svc_openai)
hap_fuzzer(kv_stream_fuzz LIBS hap_svc_common)
hap_fuzzer(embed_stream_fuzz LIBS hap_svc_common)
hap_fuzzer(trace_context_fuzz LIBS hap_telemetry)

# `cmake --build build-fuzz --target hap_fuzzers` builds them all and nothing else.
add_custom_target(hap_fuzzers DEPENDS ${HAP_FUZZ_TARGETS})
