lorabench_unit_test(test_config SOURCES ${CMAKE_CURRENT_LIST_DIR}/test_config.cpp LIBS lorabench_config)
lorabench_unit_test(test_paths SOURCES ${CMAKE_CURRENT_LIST_DIR}/test_paths.cpp LIBS lorabench_config)
lorabench_unit_test(test_stop_request SOURCES ${CMAKE_CURRENT_LIST_DIR}/test_stop_request.cpp LIBS lorabench_core)
