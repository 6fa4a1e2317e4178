// Which library lorabench's own calls into the C++ standard library bind to, in a binary linked like
// lorabench (cmake/LorabenchTorch.cmake): the system libstdc++, not the copy of std::filesystem that
// libtorch's wheels export (torch 2.11.0's crashes when called from code built by another GCC).
#include <ATen/ATen.h>
#include <dlfcn.h>
#include <gtest/gtest.h>
#include <unistd.h>

#include <cstdint>
#include <filesystem>
#include <string>
#include <system_error>

namespace {

// The shared object defining the function at this address: the address is read through this
// executable's GOT, so it is the definition the dynamic linker bound lorabench-like code to.
std::string defining_object(const void* fn) {
  Dl_info info{};
  if (dladdr(fn, &info) == 0 || info.dli_fname == nullptr) return "(unknown)";
  return info.dli_fname;
}

}  // namespace

TEST(LinkOrder, StdFilesystemComesFromLibstdcxx) {
  // This binary really uses libtorch (so it is loaded, as in lorabench, whatever the linker's as-needed default).
  ASSERT_EQ(at::ones({3}).sum().item<float>(), 3.0f);
  using RemoveAll = std::uintmax_t (*)(const std::filesystem::path&, std::error_code&);
  using Status = std::filesystem::file_status (*)(const std::filesystem::path&, std::error_code&);
  const RemoveAll remove_all = &std::filesystem::remove_all;
  const Status status = &std::filesystem::status;
  const std::string remove_all_in = defining_object(reinterpret_cast<const void*>(remove_all));
  const std::string status_in = defining_object(reinterpret_cast<const void*>(status));
  EXPECT_NE(remove_all_in.find("libstdc++"), std::string::npos)
      << "std::filesystem::remove_all resolves to " << remove_all_in
      << ": a library ahead of libstdc++ in the link order exports its own copy";
  EXPECT_NE(status_in.find("libstdc++"), std::string::npos) << "std::filesystem::status resolves to " << status_in;
  // And the call works (it crashed inside torch 2.11.0's copy).
  std::error_code ec;
  const auto dir = std::filesystem::temp_directory_path() / ("lorabench_link_order_" + std::to_string(::getpid()));
  std::filesystem::create_directories(dir / "a" / "b");
  EXPECT_EQ(std::filesystem::remove_all(dir, ec), 3u);
  EXPECT_FALSE(ec) << ec.message();
}
