# Label fuzz: `scripts/fuzz.sh check` of every libFuzzer target, failing on any finding. The check is
# deterministic (each seed-corpus input, the regression inputs kept there among them, then a fixed number
# of executions with a fixed seed from the seeds alone), so the suite cannot fail by chance on a finding
# unrelated to the change under test; the open-ended random campaign is `scripts/fuzz.sh run all`, run by
# hand (docs/testing.md). The targets need clang, so they live in a build directory of their own,
# <build>/fuzz, configured and built by scripts/fuzz.sh; the test fuzz_build does that once (cheap when up
# to date) and every target's test depends on it.
set(fuzz_env "LORABENCH_FUZZ_BUILD_DIR=${PROJECT_BINARY_DIR}/fuzz;OMP_NUM_THREADS=1")
execute_process(COMMAND ${PROJECT_SOURCE_DIR}/scripts/fuzz.sh list OUTPUT_VARIABLE fuzz_targets
                OUTPUT_STRIP_TRAILING_WHITESPACE COMMAND_ERROR_IS_FATAL ANY)
string(REPLACE "\n" ";" fuzz_targets "${fuzz_targets}")
# The build runs alone: it takes both cores for ~3 minutes the first time.
add_test(NAME fuzz_build COMMAND ${PROJECT_SOURCE_DIR}/scripts/fuzz.sh build)
set_tests_properties(fuzz_build PROPERTIES LABELS fuzz TIMEOUT 1800 RUN_SERIAL TRUE FIXTURES_SETUP lorabench_fuzz_build
                     ENVIRONMENT "${fuzz_env}")
foreach(t IN LISTS fuzz_targets)
  add_test(NAME ${t} COMMAND ${PROJECT_SOURCE_DIR}/scripts/fuzz.sh check ${t})
  set_tests_properties(${t} PROPERTIES LABELS fuzz TIMEOUT 300 FIXTURES_REQUIRED lorabench_fuzz_build
                       ENVIRONMENT "${fuzz_env}")
endforeach()
# Two runs started together (as ctest -j does with the tests above) must not break each other's build step.
add_test(NAME fuzz_concurrent_runs COMMAND ${CMAKE_CURRENT_LIST_DIR}/concurrent_runs.sh)
set_tests_properties(fuzz_concurrent_runs PROPERTIES LABELS fuzz TIMEOUT 300 FIXTURES_REQUIRED lorabench_fuzz_build
                     ENVIRONMENT "${fuzz_env}")
# The check is deterministic: run twice, one target gives the same executions and coverage.
add_test(NAME fuzz_check_deterministic COMMAND ${CMAKE_CURRENT_LIST_DIR}/check_deterministic.sh fuzz_tokenizer)
set_tests_properties(fuzz_check_deterministic PROPERTIES LABELS fuzz TIMEOUT 300 FIXTURES_REQUIRED lorabench_fuzz_build
                     ENVIRONMENT "${fuzz_env}")
