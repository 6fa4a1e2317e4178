// Small, stable hashes used across layers: SplitMix64 for seeded, counter-based randomness (token ids,
// dropout keys, shuffles, initialisation) and FNV-1a for digests of bytes (replica checks, checkpoint
// fingerprints). Their values are part of what runs reproduce, so they never change.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>

namespace lorabench {

inline constexpr uint64_t kGoldenGamma = 0x9E3779B97F4A7C15ull;

// SplitMix64's output function: a bijective mix of 64 bits.
inline uint64_t fmix64(uint64_t z) {
  z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
  z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
  return z ^ (z >> 31);
}

// Counter-based SplitMix64: the value at counter x (stateless; seekable).
inline uint64_t splitmix64(uint64_t x) { return fmix64(x + kGoldenGamma); }

// The sequential SplitMix64 generator: advances `state` and returns the next value.
inline uint64_t splitmix64_next(uint64_t& state) { return fmix64(state += kGoldenGamma); }

// FNV-1a, 64 bits, fed incrementally.
struct Fnv1a {
  uint64_t h = 1469598103934665603ull;
  void add(const void* p, size_t n) {
    const auto* b = static_cast<const unsigned char*>(p);
    for (size_t i = 0; i < n; ++i) h = (h ^ b[i]) * 1099511628211ull;
  }
  void add(const std::string& s) { add(s.data(), s.size()); }
};

}  // namespace lorabench
