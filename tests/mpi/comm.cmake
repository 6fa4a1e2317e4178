# Communication layer, under mpirun at 2 and 4 ranks (oversubscribed).
set(_d ${CMAKE_CURRENT_LIST_DIR})
lorabench_mpi_test(test_comm_collectives SOURCES ${_d}/test_comm_collectives.cpp LIBS lorabench_comm RANKS 2 4
                   TIMEOUT 300)
lorabench_mpi_test(test_comm_checker SOURCES ${_d}/test_comm_checker.cpp LIBS lorabench_comm RANKS 2 4 TIMEOUT 120)
lorabench_mpi_test(test_comm_topology SOURCES ${_d}/test_comm_topology.cpp LIBS lorabench_comm RANKS 2 4 TIMEOUT 120)
# The collective timeline (wait for peers vs transfer) and the clock offsets between ranks.
lorabench_mpi_test(test_comm_timeline SOURCES ${_d}/test_comm_timeline.cpp LIBS lorabench_comm RANKS 2 4 TIMEOUT 120)
lorabench_mpi_test(test_comm_bench SOURCES ${_d}/test_comm_bench.cpp LIBS lorabench_comm RANKS 2 4 TIMEOUT 300)
# The NCCL bootstrap (id broadcast) runs without a GPU; a build without NCCL checks the refusal instead.
lorabench_mpi_test(test_comm_nccl SOURCES ${_d}/test_comm_nccl.cpp LIBS lorabench_comm RANKS 2 TIMEOUT 120)

# NCCL collectives on GPUs (one per rank): label "gpu"; reported as Skipped (exit 77) without them.
if(LORABENCH_HAVE_NCCL)
  add_executable(test_comm_nccl_gpu ${_d}/test_comm_nccl_gpu.cpp)
  target_link_libraries(test_comm_nccl_gpu PRIVATE lorabench_comm GTest::gtest lorabench_warnings)
  foreach(n 1 2)
    add_test(NAME test_comm_nccl_gpu_np${n} COMMAND ${LORABENCH_MPIEXEC} -n ${n} $<TARGET_FILE:test_comm_nccl_gpu>)
    set_tests_properties(test_comm_nccl_gpu_np${n} PROPERTIES LABELS gpu TIMEOUT 300 SKIP_RETURN_CODE 77)
  endforeach()
endif()

# MPI behind the staging decorator (device buffers through host copies), with a counting host "device".
lorabench_mpi_test(test_comm_staging SOURCES ${_d}/test_comm_staging.cpp LIBS lorabench_comm RANKS 2 4 TIMEOUT 300)
