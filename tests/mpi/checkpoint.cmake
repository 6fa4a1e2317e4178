# Checkpoints under mpirun: both write modes produce the same file contents, the atomic commit and
# keep_last, corrupt-file detection and the fallback of resume = latest, bit-exact resume at the same
# world size and strategy (LoRA dropout on), resharding across world sizes and strategies.
lorabench_mpi_test(test_checkpoint SOURCES ${CMAKE_CURRENT_LIST_DIR}/test_checkpoint.cpp LIBS lorabench_train
                   RANKS 2 4 TIMEOUT 300)
# Not a test: gathered vs parallel write times (docs/checkpoints.md), mpirun -n N lorabench_checkpoint_bench DIR.
add_executable(lorabench_checkpoint_bench ${CMAKE_CURRENT_LIST_DIR}/checkpoint_bench.cpp)
target_link_libraries(lorabench_checkpoint_bench PRIVATE lorabench_io lorabench_model lorabench_warnings)
