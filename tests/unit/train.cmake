# The configuration's translation into the layers' values (train/run_specs).
lorabench_unit_test(test_run_specs SOURCES ${CMAKE_CURRENT_LIST_DIR}/test_run_specs.cpp LIBS lorabench_train)
