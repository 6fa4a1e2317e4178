# metrics (torch-free parts): PAPI phase counters, Chrome traces, FLOP model / MFU, statistics.
# The PAPI path tested is the one this build links: test_metrics_papi_on.cpp when LORABENCH_HAVE_PAPI,
# else test_metrics_papi_off.cpp; LORABENCH_TEST_HAVE_PAPI says which, and a test checks that it agrees
# with the library.
set(_metrics_tests ${CMAKE_CURRENT_LIST_DIR}/test_metrics_papi.cpp ${CMAKE_CURRENT_LIST_DIR}/test_metrics_trace.cpp
                   ${CMAKE_CURRENT_LIST_DIR}/test_metrics_flops.cpp ${CMAKE_CURRENT_LIST_DIR}/test_metrics_roofline.cpp
                   ${CMAKE_CURRENT_LIST_DIR}/test_metrics_stats.cpp)
if(LORABENCH_HAVE_PAPI)
  list(APPEND _metrics_tests ${CMAKE_CURRENT_LIST_DIR}/test_metrics_papi_on.cpp)
else()
  list(APPEND _metrics_tests ${CMAKE_CURRENT_LIST_DIR}/test_metrics_papi_off.cpp)
endif()
lorabench_unit_test(test_metrics SOURCES ${_metrics_tests} LIBS lorabench_metrics nlohmann_json::nlohmann_json)
if(LORABENCH_HAVE_PAPI)
  target_compile_definitions(test_metrics PRIVATE LORABENCH_TEST_HAVE_PAPI=1)
  # test_metrics_papi_on.cpp also tests the private kernel software-counter path.
  target_include_directories(test_metrics PRIVATE ${PROJECT_SOURCE_DIR}/src/metrics)
else()
  target_compile_definitions(test_metrics PRIVATE LORABENCH_TEST_HAVE_PAPI=0)
endif()
