# Runs `hapctl plan --json` and checks the numbers (cmake -DHAPCTL=<path> -P this file).
function(run_plan out_var)
  execute_process(COMMAND ${HAPCTL} plan ${ARGN} --json OUTPUT_VARIABLE out
                  ERROR_VARIABLE err RESULT_VARIABLE rc)
  if(NOT rc EQUAL 0)
    message(FATAL_ERROR "hapctl plan ${ARGN} failed (${rc}): ${err}")
  endif()
  set(${out_var} "${out}" PARENT_SCOPE)
endfunction()

run_plan(full --preset llava-1.5-7b --retain 576)
string(JSON m GET "${full}" M)
string(JSON fp GET "${full}" flops_paper_T)
if(NOT m EQUAL 1)
  message(FATAL_ERROR "retain 576: M = ${m}, want 1")
endif()
# flops_paper_T must be 3.82 ± 0.005, i.e. within [3.815, 3.825).
if(NOT fp MATCHES "^3\\.(81[5-9]|82[0-4])")
  message(FATAL_ERROR "retain 576: flops_paper_T = ${fp}, want 3.82")
endif()
string(JSON fpr GET "${full}" flops_paper)
if(NOT fpr MATCHES "^3817152184320(\\.0*)?$" AND NOT fpr MATCHES "^3\\.81715218432[0-9]*e\\+?12$")
  message(FATAL_ERROR "retain 576: flops_paper = ${fpr}, want 3817152184320")
endif()

run_plan(p64 --preset llava-1.5-7b --retain 64)
string(JSON m GET "${p64}" M)
string(JSON ng LENGTH "${p64}" groups)
string(JSON g0 GET "${p64}" groups 0 visual_tokens)
string(JSON last GET "${p64}" groups 15 layers 1)
string(JSON avg GET "${p64}" average_visual_tokens)
if(NOT m EQUAL 16 OR NOT ng EQUAL 16 OR NOT g0 EQUAL 576 OR NOT last EQUAL 31)
  message(FATAL_ERROR "retain 64: M=${m} groups=${ng} g0=${g0} last layer=${last}")
endif()
if(NOT avg STREQUAL "57.0625")
  message(FATAL_ERROR "retain 64: average_visual_tokens = ${avg}, want 57.0625")
endif()

# --schedule flat: HAP's 16 groups, group 0 at 576, every later group at round(22.47) = 22.
run_plan(f64 --preset llava-1.5-7b --retain 64 --schedule flat)
string(JSON sch GET "${f64}" schedule)
string(JSON m GET "${f64}" M)
string(JSON g0 GET "${f64}" groups 0 visual_tokens)
string(JSON g1 GET "${f64}" groups 1 visual_tokens)
string(JSON g15 GET "${f64}" groups 15 visual_tokens)
string(JSON avg GET "${f64}" average_visual_tokens)
if(NOT sch STREQUAL "flat" OR NOT m EQUAL 16 OR NOT g0 EQUAL 576 OR NOT g1 EQUAL 22
   OR NOT g15 EQUAL 22 OR NOT avg STREQUAL "56.625")
  message(FATAL_ERROR "retain 64 flat: schedule=${sch} M=${m} groups ${g0}/${g1}/${g15} "
                      "average ${avg}")
endif()

run_plan(pct --preset llava-1.5-7b --retain 5.6%)
string(JSON m GET "${pct}" M)
if(NOT m EQUAL 32)
  message(FATAL_ERROR "retain 5.6%: M = ${m}, want 32")
endif()

execute_process(COMMAND ${HAPCTL} plan --preset llava-1.5-7b --retain 20
                ERROR_VARIABLE err RESULT_VARIABLE rc OUTPUT_QUIET)
if(NOT rc EQUAL 2 OR NOT err MATCHES "minimum reachable average of 29.1")
  message(FATAL_ERROR "retain 20: rc=${rc}, stderr: ${err}")
endif()

# --model DIR reads config.json: no vision_config → CLIP ViT-L/14-336 (576 tokens); a
# vision_config without sizes → CLIPVisionConfig's 224/32 (49 tokens); "full" adds CLS.
set(dir "${WORK}/plan_model")
set(small_config [=[{"model_type": "llava", "text_config": {"hidden_size": 256,
  "intermediate_size": 688, "num_hidden_layers": 8, "num_attention_heads": 4}}]=])
file(MAKE_DIRECTORY "${dir}")
file(WRITE "${dir}/config.json" "${small_config}")
run_plan(m1 --model "${dir}" --retain 100%)
string(JSON v GET "${m1}" visual_tokens)
string(JSON l GET "${m1}" layers)
string(JSON f GET "${m1}" unpruned_flops_paper)
# 8·(4·576·256² + 2·576²·256 + 3·576·256·688) = 8·625,213,440 = 5,001,707,520
if(NOT v EQUAL 576 OR NOT l EQUAL 8 OR NOT f MATCHES "^5001707520(\\.0*)?$")
  message(FATAL_ERROR "--model (no vision_config): V=${v} L=${l} unpruned_flops_paper=${f}")
endif()
file(WRITE "${dir}/config.json" [=[{"model_type": "llava", "vision_config": {}}]=])
run_plan(m2 --model "${dir}" --retain 64)
string(JSON v GET "${m2}" visual_tokens)
if(NOT v EQUAL 49)
  message(FATAL_ERROR "--model (empty vision_config): V=${v}, want 49")
endif()
file(WRITE "${dir}/config.json" [=[{"model_type": "llava", "vision_feature_select_strategy":
  "full", "vision_config": {"image_size": 112, "patch_size": 14}}]=])
run_plan(m3 --model "${dir}" --flops 1)
string(JSON v GET "${m3}" visual_tokens)
if(NOT v EQUAL 65)
  message(FATAL_ERROR "--model (112/14, full): V=${v}, want 65")
endif()

# The text table prints each FLOPs row in the unit of its unpruned count: T for LLaVA-1.5-7B,
# G for the 8-layer model above (5.0017G unpruned, paper convention), never 0.000T.
file(WRITE "${dir}/config.json" "${small_config}")
execute_process(COMMAND ${HAPCTL} plan --model "${dir}" --retain 100% OUTPUT_VARIABLE table
                RESULT_VARIABLE rc)
if(NOT rc EQUAL 0 OR NOT table MATCHES "paper \\(visual tokens only\\) +5\\.002G +5\\.002G"
   OR table MATCHES "0\\.000T")
  message(FATAL_ERROR "hapctl plan table (small model), rc=${rc}:\n${table}")
endif()
execute_process(COMMAND ${HAPCTL} plan --preset llava-1.5-7b --retain 576 OUTPUT_VARIABLE table
                RESULT_VARIABLE rc)
if(NOT rc EQUAL 0 OR NOT table MATCHES "paper \\(visual tokens only\\) +3\\.817T +3\\.817T")
  message(FATAL_ERROR "hapctl plan table (llava-1.5-7b), rc=${rc}:\n${table}")
endif()

# Qwen2.5-VL: the visual tokens follow the image's size through smart_resize (1000 px → 1008 →
# 36 × 36 merged patches; 4000 px past the 12.8 MP budget → 3584 px → 128 × 128), 28 layers.
foreach(case "1;1296" "4;5041" "16;16384")
  list(GET case 0 mp)
  list(GET case 1 want)
  run_plan(q --preset qwen2.5-vl-7b --megapixels ${mp} --retain 25%)
  string(JSON v GET "${q}" visual_tokens)
  string(JSON layers GET "${q}" layers)
  if(NOT v EQUAL want OR NOT layers EQUAL 28)
    message(FATAL_ERROR "qwen2.5-vl-7b at ${mp} MP: V=${v} layers=${layers}, want ${want}, 28")
  endif()
endforeach()
execute_process(COMMAND ${HAPCTL} plan --preset llava-1.5-7b --megapixels 4 --retain 64
                ERROR_VARIABLE err RESULT_VARIABLE rc)
if(rc EQUAL 0 OR NOT err MATCHES "megapixels is for Qwen2.5-VL")
  message(FATAL_ERROR "--megapixels on LLaVA: rc=${rc}: ${err}")
endif()
