# End-to-end: the real lorabench binary under mpirun, tiny sweeps; label e2e.
add_executable(lorabench_e2e_check ${CMAKE_CURRENT_LIST_DIR}/lorabench_e2e_check.cpp)
target_link_libraries(lorabench_e2e_check PRIVATE lorabench_io nlohmann_json::nlohmann_json lorabench_warnings)
# The NCCL the communicator was linked against (real path), or "" in a build without it: doctor-json checks
# that the running lorabench loads exactly that one copy.
set(_expect_nccl "")
if(LORABENCH_HAVE_NCCL)
  get_filename_component(_expect_nccl "${NCCL_LIBRARY}" REALPATH)
endif()
target_compile_definitions(lorabench_e2e_check PRIVATE LORABENCH_EXPECT_NCCL="${_expect_nccl}")
foreach(case sweep config doctor)
  add_test(NAME e2e_comm_${case}
           COMMAND ${CMAKE_CURRENT_LIST_DIR}/comm_e2e.sh ${case} $<TARGET_FILE:lorabench>
                   $<TARGET_FILE:lorabench_e2e_check> ${CMAKE_CURRENT_BINARY_DIR}/e2e_comm_${case} ${LORABENCH_MPIEXEC})
  set_tests_properties(e2e_comm_${case} PROPERTIES LABELS e2e TIMEOUT 300
                       ENVIRONMENT "OMP_NUM_THREADS=1;OPENBLAS_NUM_THREADS=1")
endforeach()
