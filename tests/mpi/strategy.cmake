lorabench_mpi_test(test_strategies SOURCES ${CMAKE_CURRENT_LIST_DIR}/test_strategies.cpp
                   LIBS lorabench_train RANKS 2 4 TIMEOUT 900)
