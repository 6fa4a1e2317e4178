# End-to-end bottleneck attribution: a 2-rank ddp run per cause (balanced, one rank slowed by a factor, slow
# data loading, a slowed link, one rank's core shared with a busy process), each attributed by
# lorabench-report to the right cause and rank; label e2e. The runs are timing measurements, so they run
# alone (RUN_SERIAL): no other test competes for the cores while they measure. Processes of higher priority
# than the test (a build at nice 0 while ctest runs under nice) still can: the kernel then spreads them so
# that both ranks lose alike, and external_load's busy process no longer makes rank 1 the slower one. On
# failure the script prints the load and the busiest processes.
foreach(case balanced slow_rank slow_data slow_comm external_load)
  add_test(NAME e2e_bottleneck_${case}
           COMMAND ${CMAKE_CURRENT_LIST_DIR}/bottleneck_e2e.sh ${case} $<TARGET_FILE:lorabench>
                   $<TARGET_FILE:lorabench-report> $<TARGET_FILE:lorabench_e2e_check>
                   ${CMAKE_CURRENT_BINARY_DIR}/e2e_bottleneck_${case} ${PROJECT_SOURCE_DIR} ${LORABENCH_MPIEXEC})
  set_tests_properties(e2e_bottleneck_${case} PROPERTIES LABELS e2e TIMEOUT 600 RUN_SERIAL TRUE
                       ENVIRONMENT "OMP_NUM_THREADS=1;OPENBLAS_NUM_THREADS=1")
endforeach()
