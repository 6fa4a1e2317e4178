# The configuration's translation into the layers' values (train/run_specs).
lorabench_unit_test(test_run_specs SOURCES ${CMAKE_CURRENT_LIST_DIR}/test_run_specs.cpp LIBS lorabench_train)
# The run's summary from its step rows (train/run_summary, a pure function apart from the training loop).
lorabench_unit_test(test_run_summary SOURCES ${CMAKE_CURRENT_LIST_DIR}/test_run_summary.cpp LIBS lorabench_train)
