# The fuzzers' regression inputs (tests/fuzz/corpus/*/regress-*) through the ordinary build's readers.
lorabench_unit_test(test_fuzz_regressions SOURCES ${CMAKE_CURRENT_LIST_DIR}/test_fuzz_regressions.cpp
                    LIBS lorabench_lora lorabench_data lorabench_io lorabench_report)
target_include_directories(test_fuzz_regressions PRIVATE ${PROJECT_SOURCE_DIR}/tests/fuzz)
