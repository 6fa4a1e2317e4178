# Label "slurm": a real one-node Slurm cluster started on this machine by scripts/slurm/slurm_up.sh
# (munged, slurmctld, slurmd; needs slurm-wlm and munge from scripts/install-deps.sh), the slurm/ batch
# scripts submitted to it with CI-sized inputs, and the daemons stopped afterwards, also on failure.
# The cases share nothing but the ports, so they never run at once (RESOURCE_LOCK). Each case's own
# waits end well before TIMEOUT, so its cleanup trap runs even when a job hangs.
foreach(case ddp_2cpu preempt srun_fsdp matrix memory)
  add_test(NAME slurm_${case}
           COMMAND ${CMAKE_CURRENT_LIST_DIR}/slurm_e2e.sh ${case} $<TARGET_FILE:lorabench>
                   ${CMAKE_CURRENT_BINARY_DIR}/slurm_${case} $<TARGET_FILE:lorabench_checkpoint_check>)
  set_tests_properties(slurm_${case} PROPERTIES LABELS slurm TIMEOUT 420 RESOURCE_LOCK lorabench_slurm_cluster)
endforeach()
