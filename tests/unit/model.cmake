lorabench_unit_test(test_model_reference SOURCES ${CMAKE_CURRENT_LIST_DIR}/test_model_reference.cpp
                    LIBS lorabench_lora)
lorabench_unit_test(test_model_grads SOURCES ${CMAKE_CURRENT_LIST_DIR}/test_model_grads.cpp LIBS lorabench_lora)
lorabench_unit_test(test_safetensors SOURCES ${CMAKE_CURRENT_LIST_DIR}/test_safetensors.cpp LIBS lorabench_lora)
lorabench_unit_test(test_kernels SOURCES ${CMAKE_CURRENT_LIST_DIR}/test_kernels.cpp LIBS lorabench_model)
lorabench_unit_test(test_adapter_config SOURCES ${CMAKE_CURRENT_LIST_DIR}/test_adapter_config.cpp LIBS lorabench_lora)
lorabench_unit_test(test_model_qwen3 SOURCES ${CMAKE_CURRENT_LIST_DIR}/test_model_qwen3.cpp LIBS lorabench_lora lorabench_config)
lorabench_unit_test(test_delta_rule SOURCES ${CMAKE_CURRENT_LIST_DIR}/test_delta_rule.cpp LIBS lorabench_model)
lorabench_unit_test(test_model_qwen3_5 SOURCES ${CMAKE_CURRENT_LIST_DIR}/test_model_qwen3_5.cpp LIBS lorabench_lora lorabench_config)
lorabench_unit_test(test_tensor_parallel_layout SOURCES ${CMAKE_CURRENT_LIST_DIR}/test_tensor_parallel_layout.cpp
                    LIBS lorabench_model)
