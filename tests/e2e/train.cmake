# End-to-end: the real lorabench binary on the tiny preset, one rank and under mpirun; label e2e.
foreach(case single ddp errors existing help keys nan trace forward eval tp plan verdict)
  add_test(NAME e2e_train_${case}
           COMMAND ${CMAKE_CURRENT_LIST_DIR}/train_e2e.sh ${case} $<TARGET_FILE:lorabench>
                   $<TARGET_FILE:lorabench_e2e_check> ${CMAKE_CURRENT_BINARY_DIR}/e2e_train_${case}
                   ${PROJECT_SOURCE_DIR} ${LORABENCH_MPIEXEC})
  set_tests_properties(e2e_train_${case} PROPERTIES LABELS e2e TIMEOUT 600
                       ENVIRONMENT "OMP_NUM_THREADS=1;OPENBLAS_NUM_THREADS=1")
endforeach()

# README's "Using it" block, literally, with an installed lorabench (tests/e2e/readme_e2e.sh).
add_test(NAME e2e_readme_using_it
         COMMAND ${CMAKE_CURRENT_LIST_DIR}/readme_e2e.sh ${PROJECT_BINARY_DIR} ${PROJECT_SOURCE_DIR}
                 ${CMAKE_CURRENT_BINARY_DIR}/e2e_readme ${LORABENCH_MPIEXEC})
set_tests_properties(e2e_readme_using_it PROPERTIES LABELS e2e TIMEOUT 900
                     ENVIRONMENT "OMP_NUM_THREADS=1;OPENBLAS_NUM_THREADS=1")
