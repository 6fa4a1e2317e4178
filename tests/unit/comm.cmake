lorabench_unit_test(test_comm_unit SOURCES ${CMAKE_CURRENT_LIST_DIR}/test_comm.cpp LIBS lorabench_comm lorabench_io)
# What CMake resolved, so the test fails when nccl_built() disagrees with the build.
target_compile_definitions(test_comm_unit PRIVATE LORABENCH_EXPECT_NCCL=$<BOOL:${LORABENCH_HAVE_NCCL}>)
# The watchdog thread on its own (CUDA-free): also what `scripts/sanitize.sh tsan` builds and runs.
lorabench_unit_test(test_comm_watchdog SOURCES ${CMAKE_CURRENT_LIST_DIR}/test_watchdog.cpp LIBS lorabench_comm)
