# lorabench-report end to end: real single (1 rank) and ddp (2 ranks) runs of inputs/tiny.ini and a
# 2-rank `lorabench comm`, then the report on their output directory; label e2e.
add_test(NAME e2e_report
         COMMAND ${CMAKE_CURRENT_LIST_DIR}/report_e2e.sh $<TARGET_FILE:lorabench> $<TARGET_FILE:lorabench-report>
                 ${PROJECT_SOURCE_DIR}/inputs/tiny.ini ${CMAKE_CURRENT_BINARY_DIR}/e2e_report ${LORABENCH_MPIEXEC})
set_tests_properties(e2e_report PROPERTIES LABELS e2e TIMEOUT 600
                     ENVIRONMENT "OMP_NUM_THREADS=1;OPENBLAS_NUM_THREADS=1")
