# The benchmark's equal-work check end to end (bench/run_bench.py --quick: the tiny shape, lorabench
# against transformers + peft eager from one snapshot and the same tokens): `valid` must pass and report
# both sides, `qwen3` and `qwen3_5` the same on the Qwen3 and Qwen3.5 snapshots; `mismatch` gives the peer the next seed's tokens and
# must fail the check; `sweep` the
# micro-batch sweep (--sweep-batch) and its "does not fit" classifier; `deepspeed` the DeepSpeed table
# (--deepspeed, tiny shape: lorabench zero2 and fsdp against DeepSpeed's four sides on 2 ranks, with the ops
# DeepSpeed compiled on the first run taken from lorabench's cache). Needs the venv
# that scripts/install-deps.sh fills with torch and the pinned peers (a missing peer fails the test); not
# registered when LORABENCH_TORCH is not a venv. Label e2e. e2e_bench_profiles runs both step profilers on
# the tiny shape. On a CPU without AVX-512 the peers run in fp32 (bench_peers_e2e.sh says why: libtorch's
# bf16 GEMMs are its reference loops there); 600 s each leaves room for slower machines.
if(EXISTS "${LORABENCH_TORCH}/bin/python")
  foreach(case valid qwen3 qwen3_5 mismatch sweep deepspeed crossover)
    add_test(NAME e2e_bench_peers_${case}
             COMMAND ${CMAKE_CURRENT_LIST_DIR}/bench_peers_e2e.sh ${case} "${LORABENCH_TORCH}/bin/python"
                     $<TARGET_FILE:lorabench> ${PROJECT_SOURCE_DIR} ${CMAKE_CURRENT_BINARY_DIR}/e2e_bench_peers)
    set_tests_properties(e2e_bench_peers_${case} PROPERTIES LABELS e2e TIMEOUT 600)
  endforeach()
else()
  message(STATUS "e2e_bench_peers: not registered (LORABENCH_TORCH=${LORABENCH_TORCH} is not a venv)")
endif()
# Both profilers' group tables (docs/performance.md "Where the time goes"), where bench/ is built.
if(EXISTS "${LORABENCH_TORCH}/bin/python" AND TARGET lorabench-profile-ops)
  add_test(NAME e2e_bench_profiles
           COMMAND ${CMAKE_CURRENT_LIST_DIR}/bench_peers_e2e.sh profiles "${LORABENCH_TORCH}/bin/python"
                   $<TARGET_FILE:lorabench-profile-ops> ${PROJECT_SOURCE_DIR} ${CMAKE_CURRENT_BINARY_DIR}/e2e_bench_peers)
  set_tests_properties(e2e_bench_profiles PROPERTIES LABELS e2e TIMEOUT 600)
endif()
# The exported adapter in PEFT (tests/e2e/peft_load_e2e.sh): the same pinned peers, the tiny Qwen2 and
# Qwen3 snapshots of tests/fixtures.
if(EXISTS "${LORABENCH_TORCH}/bin/python")
  add_test(NAME e2e_peft_load
           COMMAND ${CMAKE_CURRENT_LIST_DIR}/peft_load_e2e.sh "${LORABENCH_TORCH}/bin/python" $<TARGET_FILE:lorabench>
                   ${PROJECT_SOURCE_DIR} ${CMAKE_CURRENT_BINARY_DIR}/e2e_peft_load)
  set_tests_properties(e2e_peft_load PROPERTIES LABELS e2e TIMEOUT 600)
endif()
