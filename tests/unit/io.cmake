lorabench_unit_test(test_io SOURCES ${CMAKE_CURRENT_LIST_DIR}/test_io.cpp LIBS lorabench_io)
