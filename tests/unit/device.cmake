# The device layer on CPU (choice of device and backend, CPU memory statistics and timer).
lorabench_unit_test(test_device SOURCES ${CMAKE_CURRENT_LIST_DIR}/test_device.cpp
                    LIBS lorabench_device lorabench_metrics_torch lorabench::torch)

# The link order of every binary that links libtorch: the standard library's symbols come from libstdc++.
lorabench_unit_test(test_link_order SOURCES ${CMAKE_CURRENT_LIST_DIR}/test_link_order.cpp LIBS lorabench::torch)
