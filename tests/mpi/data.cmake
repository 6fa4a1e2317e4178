# The data layer under mpirun: disjoint shards of the same global batch at 2 and 4 ranks.
lorabench_mpi_test(test_data_shards SOURCES ${CMAKE_CURRENT_LIST_DIR}/test_data_shards.cpp LIBS lorabench_data
                   RANKS 2 4 TIMEOUT 120)
