// For tests that run the Fashion-MNIST example end to end: a small synthetic dataset in the four
// IDX files (pseudo-random pixels whose mean depends on the label, so a network can learn it in
// seconds), and the params-sha256 the example prints last.
#pragma once

#include <cstdint>
#include <cstdlib>
#include <fstream>
#include <string>
#include <utility>

namespace cohort::testing {

inline void put_u32(std::ofstream& out, uint32_t v) {
  const char bytes[4] = {char(v >> 24), char(v >> 16), char(v >> 8), char(v)};
  out.write(bytes, 4);
}

/// Writes train-*/t10k-* image and label files (unpacked IDX) of `train` and `test` samples to `dir`.
inline void write_synthetic_fashion_mnist(const std::string& dir, int train, int test) {
  uint32_t state = 12345;
  auto next = [&] { return state = state * 1664525u + 1013904223u; };
  for (const auto& [prefix, n] : {std::pair<std::string, int>{"train", train}, {"t10k", test}}) {
    std::ofstream images(dir + "/" + prefix + "-images-idx3-ubyte", std::ios::binary);
    std::ofstream labels(dir + "/" + prefix + "-labels-idx1-ubyte", std::ios::binary);
    put_u32(images, 0x803);
    put_u32(images, uint32_t(n));
    put_u32(images, 28);
    put_u32(images, 28);
    put_u32(labels, 0x801);
    put_u32(labels, uint32_t(n));
    for (int i = 0; i < n; ++i) {
      const int label = static_cast<int>(next() >> 16) % 10;
      labels.put(static_cast<char>(label));
      for (int p = 0; p < 28 * 28; ++p) images.put(static_cast<char>((next() >> 24) / 2 + label * 12));
    }
  }
}

/// The hex digest of the last "params-sha256: " line of `out`, or "".
inline std::string params_digest_of(const std::string& out) {
  const auto at = out.rfind("params-sha256: ");
  return at == std::string::npos ? "" : out.substr(at + 15, 64);
}

/// `tail` under the build directory the tests run from (COHORT_BUILD_DIR, else ./build).
inline std::string build_path(const std::string& tail) {
  const char* dir = std::getenv("COHORT_BUILD_DIR");
  return std::string(dir ? dir : "build") + tail;
}

}  // namespace cohort::testing
