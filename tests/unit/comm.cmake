lorabench_unit_test(test_comm_unit SOURCES ${CMAKE_CURRENT_LIST_DIR}/test_comm.cpp LIBS lorabench_comm lorabench_io)
# What CMake resolved, so the test fails when nccl_built() disagrees with the build.
target_compile_definitions(test_comm_unit PRIVATE LORABENCH_EXPECT_NCCL=$<BOOL:${LORABENCH_HAVE_NCCL}>)
