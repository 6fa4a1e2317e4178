# Label "multinode": a real two-node Slurm cluster on this machine, each node a set of Linux namespaces
# (network, UTS, mount) joined by a veth pair (scripts/slurm/slurm_up_2node.sh; needs root, iproute2,
# util-linux, slurm-wlm and munge), the multi-node cases of docs/multinode.md run across it with the tiny
# preset, and everything removed afterwards, also on failure (tests/multinode/multinode_e2e.sh).
# Skipped (exit 77) only where the machine does not allow network namespaces or veth pairs; the test's
# output names the check. The cases share the machine's CPUs with the one-node Slurm cluster of the slurm
# label, so neither runs beside the other (RESOURCE_LOCK). Each case's own waits end well before TIMEOUT,
# so its cleanup trap runs even when a job hangs.
foreach(case sbatch srun comm files crash)
  add_test(NAME multinode_${case}
           COMMAND ${CMAKE_CURRENT_LIST_DIR}/multinode_e2e.sh ${case} $<TARGET_FILE:lorabench>
                   $<TARGET_FILE:lorabench_e2e_check> $<TARGET_FILE:lorabench_checkpoint_check>
                   ${CMAKE_CURRENT_BINARY_DIR}/multinode_${case})
  set_tests_properties(multinode_${case} PROPERTIES LABELS multinode TIMEOUT 300 SKIP_RETURN_CODE 77
                       RESOURCE_LOCK lorabench_slurm_cluster)
endforeach()
