# docs/results.md is generated from the evidence files under results/, and every figure on it and every
# speed, memory or accuracy figure of docs/performance.md is in one (tests/docs/results_evidence_check.py;
# docs/performance.md, "Recording evidence"). Plain python3 on the source tree, under a second: label unit.
add_test(NAME docs_results_evidence
         COMMAND python3 ${PROJECT_SOURCE_DIR}/tests/docs/results_evidence_check.py --root ${PROJECT_SOURCE_DIR})
set_tests_properties(docs_results_evidence PROPERTIES LABELS unit TIMEOUT 60)
