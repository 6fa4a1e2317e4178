# lorabench-report (postprocess/): golden Markdown from fixture run files written by the test itself
# (tests/unit/report_fixtures.cpp, known numbers), damaged / foreign / other-version files, the bottleneck
# rules and the SVG writer; and the binary must not link libtorch.
lorabench_unit_test(test_report
                    SOURCES ${CMAKE_CURRENT_LIST_DIR}/test_report.cpp ${CMAKE_CURRENT_LIST_DIR}/report_fixtures.cpp
                    LIBS lorabench_report)
target_compile_definitions(test_report PRIVATE LORABENCH_REPORT_BIN="$<TARGET_FILE:lorabench-report>"
                                               LORABENCH_TEST_BINARY_DIR="${CMAKE_CURRENT_BINARY_DIR}")
add_dependencies(test_report lorabench-report)

add_test(NAME report_no_libtorch
         COMMAND sh ${CMAKE_CURRENT_LIST_DIR}/report_no_libtorch.sh $<TARGET_FILE:lorabench-report>)
set_tests_properties(report_no_libtorch PROPERTIES LABELS unit TIMEOUT 60)
