// A PEFT adapter's adapter_config.json (lora.init_from, `forward --adapter`, `checkpoint` export checks):
// read_adapter_config, then the LoraSpec it describes and its differences from a run's settings, as
// load_adapter does before it touches the tensors.
#include <cstdint>
#include <string>

#include "fuzz_common.hpp"
#include "lorabench/lora/adapter_config.hpp"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string path = lbfuzz::write_input("adapter_config.json", data, size);
  lbfuzz::expect_clean(path, [&] {
    const lorabench::lora::AdapterConfig c = lorabench::lora::read_adapter_config(lbfuzz::temp_dir().string());
    if (c.r <= 0) lbfuzz::finding("read_adapter_config accepted r <= 0");
    (void)lorabench::lora::adapter_mismatches(c, lorabench::model::LoraSpec{});
    (void)lorabench::lora::lora_spec_of(c);
  });
  return 0;
}
