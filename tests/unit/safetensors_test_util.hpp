// Shared by the model tests: two safetensors files hold the same tensors, by name, shape and bit pattern.
#pragma once

#include <gtest/gtest.h>

#include <cstring>
#include <string>

#include "lorabench/io/safetensors.hpp"

namespace lbtest {

inline void expect_same_tensors(const std::string& expected_path, const std::string& actual_path) {
  lorabench::io::SafeTensorsFile expected(expected_path), actual(actual_path);
  ASSERT_EQ(expected.tensors().size(), actual.tensors().size()) << expected_path << " vs " << actual_path;
  for (const auto& t : expected.tensors()) {
    const lorabench::io::SafeTensorInfo* a = actual.find(t.name);
    ASSERT_NE(a, nullptr) << t.name << " missing from " << actual_path;
    EXPECT_EQ(a->shape, t.shape) << t.name;
    EXPECT_EQ(a->end - a->begin, t.end - t.begin) << t.name;
    if (a->end - a->begin == t.end - t.begin) {
      EXPECT_EQ(0, std::memcmp(expected.data(t), actual.data(*a), t.end - t.begin)) << t.name;
    }
  }
}

}  // namespace lbtest
