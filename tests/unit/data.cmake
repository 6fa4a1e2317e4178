# The data layer: tokenizer, chat template, dataset files, sampler, SFT batch source. Tests that need the
# real Qwen2.5 or Qwen3 tokenizer read third_party/<name>/tokenizer.json and FAIL (never skip) when it is missing.
lorabench_unit_test(test_data
  SOURCES ${CMAKE_CURRENT_LIST_DIR}/test_tokenizer.cpp ${CMAKE_CURRENT_LIST_DIR}/test_chat_template.cpp
          ${CMAKE_CURRENT_LIST_DIR}/test_chat_qwen3.cpp
          ${CMAKE_CURRENT_LIST_DIR}/test_sft_dataset.cpp ${CMAKE_CURRENT_LIST_DIR}/test_sampler.cpp
          ${CMAKE_CURRENT_LIST_DIR}/test_sft_source.cpp
  LIBS lorabench_data lorabench_config nlohmann_json::nlohmann_json lorabench_utf8proc)
