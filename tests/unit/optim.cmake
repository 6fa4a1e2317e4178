lorabench_unit_test(test_optim SOURCES ${CMAKE_CURRENT_LIST_DIR}/test_optim.cpp LIBS lorabench_optim)
