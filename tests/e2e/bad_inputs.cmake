# docs/bad-inputs.md: the real lorabench binary on each class of bad input; fails when the committed table
# differs from what the binary prints (tests/e2e/bad_inputs_e2e.sh, which also regenerates it).
add_test(NAME e2e_bad_inputs
         COMMAND ${CMAKE_CURRENT_LIST_DIR}/bad_inputs_e2e.sh $<TARGET_FILE:lorabench> ${PROJECT_SOURCE_DIR}
                 ${CMAKE_CURRENT_BINARY_DIR}/e2e_bad_inputs)
set_tests_properties(e2e_bad_inputs PROPERTIES LABELS e2e TIMEOUT 600
                     ENVIRONMENT "OMP_NUM_THREADS=1;OPENBLAS_NUM_THREADS=1")
