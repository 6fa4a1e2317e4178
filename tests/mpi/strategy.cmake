lorabench_mpi_test(test_strategies SOURCES ${CMAKE_CURRENT_LIST_DIR}/test_strategies.cpp
                   LIBS lorabench_train RANKS 2 4 TIMEOUT 900)
lorabench_mpi_test(test_fsdp_prefetch SOURCES ${CMAKE_CURRENT_LIST_DIR}/test_fsdp_prefetch.cpp
                   LIBS lorabench_train lorabench_metrics_torch RANKS 2 TIMEOUT 300)
