lorabench_mpi_test(test_nonfinite SOURCES ${CMAKE_CURRENT_LIST_DIR}/test_nonfinite.cpp LIBS lorabench_train RANKS 2)
lorabench_mpi_test(test_fused_numerics SOURCES ${CMAKE_CURRENT_LIST_DIR}/test_fused_numerics.cpp LIBS lorabench_train
                   RANKS 1)
# The planner's rows (CPU and GPU ranks, GPU sharing, NCCL's one rank per GPU), its probe on the CPU device
# and the bandwidth measured on device-layer buffers.
lorabench_mpi_test(test_plan SOURCES ${CMAKE_CURRENT_LIST_DIR}/test_plan.cpp LIBS lorabench_train RANKS 1 2)
