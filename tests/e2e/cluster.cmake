# End-to-end: the multi-node layout on one machine (parallel.emulate_nodes) and the user-facing inputs
# that slurm/ submits (docs/multinode.md, docs/slurm.md). Label e2e.
foreach(case emulated_nodes inputs)
  add_test(NAME e2e_cluster_${case}
           COMMAND ${CMAKE_CURRENT_LIST_DIR}/cluster_e2e.sh ${case} $<TARGET_FILE:lorabench>
                   ${CMAKE_CURRENT_BINARY_DIR}/e2e_cluster_${case} ${LORABENCH_MPIEXEC})
  set_tests_properties(e2e_cluster_${case} PROPERTIES LABELS e2e TIMEOUT 300
                       ENVIRONMENT "OMP_NUM_THREADS=1;OPENBLAS_NUM_THREADS=1")
endforeach()
