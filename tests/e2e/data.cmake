# `lorabench tokenize` end to end (the real binary, the real Qwen2.5 tokenizer).
add_test(NAME e2e_tokenize
         COMMAND sh ${CMAKE_CURRENT_LIST_DIR}/tokenize_check.sh $<TARGET_FILE:lorabench>
                 ${PROJECT_SOURCE_DIR}/third_party/qwen2.5/tokenizer.json)
set_tests_properties(e2e_tokenize PROPERTIES LABELS e2e TIMEOUT 120)
