# Tests that need a CUDA device: label "gpu". Each binary runs under mpirun and exits 77 (ctest: Skipped,
# never Passed) on every rank when some rank sees no GPU or the build has no CUDA path; scripts/test.sh
# runs the label everywhere, so the skip and its reason show in every test log.
set(_g ${CMAKE_CURRENT_LIST_DIR})
function(lorabench_gpu_test name)
  cmake_parse_arguments(ARG "" "TIMEOUT" "SOURCES;LIBS;RANKS;DEFINES" ${ARGN})
  add_executable(${name} ${ARG_SOURCES} ${PROJECT_SOURCE_DIR}/tests/gpu/gpu_test_main.cpp)
  target_link_libraries(${name} PRIVATE ${ARG_LIBS} lorabench_device lorabench_core GTest::gtest lorabench_warnings)
  target_compile_definitions(${name} PRIVATE ${ARG_DEFINES} LORABENCH_FIXTURES="${LORABENCH_FIXTURES}"
                                             LORABENCH_SOURCE_DIR="${PROJECT_SOURCE_DIR}")
  foreach(n IN LISTS ARG_RANKS)
    add_test(NAME ${name}_np${n} COMMAND ${LORABENCH_MPIEXEC} -n ${n} $<TARGET_FILE:${name}>)
    set_tests_properties(${name}_np${n} PROPERTIES LABELS gpu TIMEOUT ${ARG_TIMEOUT} SKIP_RETURN_CODE 77
                         ENVIRONMENT "OMP_NUM_THREADS=1;OPENBLAS_NUM_THREADS=1")
  endforeach()
endfunction()

# The model on CUDA against the CPU reference, the caching-allocator statistics, the event timer, and the
# staged MPI collectives on device buffers (2 ranks share GPU 0).
lorabench_gpu_test(test_gpu_model SOURCES ${_g}/test_gpu_model.cpp LIBS lorabench_train RANKS 1 2 TIMEOUT 600)
# Every strategy on ranks sharing one GPU (MPI staged) equals single on that GPU: the CPU equivalence test,
# built for CUDA.
lorabench_gpu_test(test_strategies_gpu SOURCES ${PROJECT_SOURCE_DIR}/tests/mpi/test_strategies.cpp
                   LIBS lorabench_train RANKS 2 TIMEOUT 900 DEFINES LB_TEST_ON_CUDA=1)
# Tensor parallelism on ranks sharing one GPU (the groups' collectives on device buffers) equals single there.
lorabench_gpu_test(test_tensor_parallel_gpu SOURCES ${PROJECT_SOURCE_DIR}/tests/mpi/test_tensor_parallel.cpp
                   LIBS lorabench_train RANKS 2 TIMEOUT 600 DEFINES LB_TEST_ON_CUDA=1)
# A 20-step single-GPU training run of the real binary (run file, device, memory, phases).
add_test(NAME e2e_gpu_train COMMAND ${_g}/gpu_train_e2e.sh $<TARGET_FILE:lorabench> ${PROJECT_SOURCE_DIR}
                                    $<TARGET_FILE:lorabench_e2e_check>)
set_tests_properties(e2e_gpu_train PROPERTIES LABELS gpu TIMEOUT 600 SKIP_RETURN_CODE 77)
