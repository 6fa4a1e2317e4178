# End-to-end: checkpoints, resume, resharding and fault injection with the real lorabench binary on the
# tiny preset (tests/e2e/checkpoint_e2e.sh); label e2e.
add_executable(lorabench_checkpoint_check ${CMAKE_CURRENT_LIST_DIR}/checkpoint_check.cpp)
target_link_libraries(lorabench_checkpoint_check PRIVATE lorabench_io lorabench_warnings)
# LD_PRELOAD shim that makes writes to chosen files fail with ENOSPC or EIO (case io_errors).
add_library(lorabench_failwrite MODULE ${CMAKE_CURRENT_LIST_DIR}/failwrite.c)
target_link_libraries(lorabench_failwrite PRIVATE ${CMAKE_DL_LIBS})
foreach(case commit kill_single kill_ddp preempt interrupt io_errors disk_full reshard refuse nan adapter)
  add_test(NAME e2e_checkpoint_${case}
           COMMAND ${CMAKE_CURRENT_LIST_DIR}/checkpoint_e2e.sh ${case} $<TARGET_FILE:lorabench>
                   $<TARGET_FILE:lorabench_e2e_check> $<TARGET_FILE:lorabench_checkpoint_check>
                   ${CMAKE_CURRENT_BINARY_DIR}/e2e_checkpoint_${case} ${PROJECT_SOURCE_DIR} ${LORABENCH_MPIEXEC})
  set_tests_properties(e2e_checkpoint_${case} PROPERTIES LABELS e2e TIMEOUT 300 SKIP_RETURN_CODE 77
                       ENVIRONMENT "OMP_NUM_THREADS=1;OPENBLAS_NUM_THREADS=1;LB_TEST_FAILWRITE=$<TARGET_FILE:lorabench_failwrite>")
endforeach()
