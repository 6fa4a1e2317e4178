lorabench_mpi_test(test_strategies SOURCES ${CMAKE_CURRENT_LIST_DIR}/test_strategies.cpp
                   LIBS lorabench_train RANKS 2 4 TIMEOUT 900)
# The same equivalence on a Qwen3-shaped model (issue 44): every strategy on 3 ranks with accumulation and
# activation checkpointing, LoRA and full fine-tuning, equals one rank.
add_test(NAME test_strategies_qwen3_np3
         COMMAND ${LORABENCH_MPIEXEC} -n 3 $<TARGET_FILE:test_strategies>
                 --gtest_filter=Equivalence/Strategies.ReproduceSingleRank/*_ac_accum4_*:-*hsdp*)
set_tests_properties(test_strategies_qwen3_np3 PROPERTIES LABELS mpi TIMEOUT 900
                     ENVIRONMENT "OMP_NUM_THREADS=1;OPENBLAS_NUM_THREADS=1;LB_TEST_MODEL=qwen3-tiny")
# And on Qwen3.5's hybrid layers (issue 45): linear-attention layers with adapters on their projections beside a
# full-attention one.
add_test(NAME test_strategies_qwen3_5_np3
         COMMAND ${LORABENCH_MPIEXEC} -n 3 $<TARGET_FILE:test_strategies>
                 --gtest_filter=Equivalence/Strategies.ReproduceSingleRank/*_ac_accum4_*:-*hsdp*)
set_tests_properties(test_strategies_qwen3_5_np3 PROPERTIES LABELS mpi TIMEOUT 900
                     ENVIRONMENT "OMP_NUM_THREADS=1;OPENBLAS_NUM_THREADS=1;LB_TEST_MODEL=qwen3.5-tiny")
lorabench_mpi_test(test_fsdp_prefetch SOURCES ${CMAKE_CURRENT_LIST_DIR}/test_fsdp_prefetch.cpp
                   LIBS lorabench_train lorabench_metrics_torch RANKS 2 TIMEOUT 300)
# Tensor parallelism (issue 47): tp over every rank, tp 2 x dp 2 on 4 ranks, replicated key/value heads at tp 4,
# each equal to one rank; and on the Qwen3 shape (q/k norms, no biases).
lorabench_mpi_test(test_tensor_parallel SOURCES ${CMAKE_CURRENT_LIST_DIR}/test_tensor_parallel.cpp
                   LIBS lorabench_train RANKS 2 4 TIMEOUT 600)
add_test(NAME test_tensor_parallel_qwen3_np4
         COMMAND ${LORABENCH_MPIEXEC} -n 4 $<TARGET_FILE:test_tensor_parallel>
                 --gtest_filter=Equivalence/TensorParallel.ReproducesSingleRank/*accum3_ac*)
set_tests_properties(test_tensor_parallel_qwen3_np4 PROPERTIES LABELS mpi TIMEOUT 600
                     ENVIRONMENT "OMP_NUM_THREADS=1;OPENBLAS_NUM_THREADS=1;LB_TEST_MODEL=qwen3-tiny")
