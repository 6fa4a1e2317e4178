# scripts/gpu_check.sh builds only its target list on the GPU machine: every executable of the gpu tests
# (and of the device unit tests it runs) must be in it. Checked in builds of the kind it makes there (CUDA
# and NCCL: the default build here); others (the sanitizer builds) lack some of its targets by design.
# The same builds run the flow of `gpu_check.sh run` here (no GPU): its summary, exit code and a cut-off run.
if(LORABENCH_TORCH_CUDA AND LORABENCH_HAVE_NCCL)
  add_test(NAME e2e_gpu_check_targets COMMAND ${CMAKE_CURRENT_LIST_DIR}/gpu_check_targets.sh ${PROJECT_BINARY_DIR}
                                              ${PROJECT_SOURCE_DIR})
  set_tests_properties(e2e_gpu_check_targets PROPERTIES LABELS e2e TIMEOUT 120)
  add_test(NAME e2e_gpu_check_flow COMMAND ${CMAKE_CURRENT_LIST_DIR}/gpu_check_flow.sh $<TARGET_FILE:lorabench>
                                           $<TARGET_FILE:lorabench-report> ${PROJECT_SOURCE_DIR}
                                           ${CMAKE_CURRENT_BINARY_DIR}/e2e_gpu_check_flow)
  set_tests_properties(e2e_gpu_check_flow PROPERTIES LABELS e2e TIMEOUT 300)
  # `pack` with this build, then `relocate` and `build` in a copy of the checkout elsewhere (the lent machine's
  # start without a build), and the refusals of a stale or broken packed build.
  add_test(NAME e2e_gpu_check_pack COMMAND ${CMAKE_CURRENT_LIST_DIR}/gpu_check_pack.sh ${PROJECT_BINARY_DIR}
                                           ${PROJECT_SOURCE_DIR} ${CMAKE_CURRENT_BINARY_DIR}/e2e_gpu_check_pack)
  set_tests_properties(e2e_gpu_check_pack PROPERTIES LABELS e2e TIMEOUT 300)
endif()
