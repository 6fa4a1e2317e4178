lorabench_mpi_test(test_nonfinite SOURCES ${CMAKE_CURRENT_LIST_DIR}/test_nonfinite.cpp LIBS lorabench_train RANKS 2)
