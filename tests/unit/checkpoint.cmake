# Checkpoint pieces without an MPI job: digests, names, fingerprint, snapshot digest, named tensors.
lorabench_unit_test(test_checkpoint_format SOURCES ${CMAKE_CURRENT_LIST_DIR}/test_checkpoint_format.cpp
                    LIBS lorabench_train)
