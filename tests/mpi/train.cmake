lorabench_mpi_test(test_nonfinite SOURCES ${CMAKE_CURRENT_LIST_DIR}/test_nonfinite.cpp LIBS lorabench_train RANKS 2)
lorabench_mpi_test(test_fused_numerics SOURCES ${CMAKE_CURRENT_LIST_DIR}/test_fused_numerics.cpp LIBS lorabench_train
                   RANKS 1)
