// SHA-256 of a module's parameters through OpenSSL's EVP interface (libcrypto), the maintained
// implementation; see digest.h for what is hashed.
#include "digest.h"

#include <openssl/evp.h>

#include <memory>
#include <stdexcept>

namespace fashion_mnist {

namespace {

using DigestContext = std::unique_ptr<EVP_MD_CTX, decltype(&EVP_MD_CTX_free)>;

void check(int ok, const char* what) {
  if (ok != 1) throw std::runtime_error(std::string("params-sha256: OpenSSL ") + what + " failed");
}

}  // namespace

std::string parameters_sha256(const torch::nn::Module& module) {
  std::vector<std::pair<std::string, torch::Tensor>> tensors;
  for (const auto& item : module.named_parameters(/*recurse=*/true)) tensors.emplace_back(item.key(), item.value());
  return tensors_sha256(tensors);
}

struct ParamsSha256::Context {
  DigestContext digest{EVP_MD_CTX_new(), &EVP_MD_CTX_free};
};

ParamsSha256::ParamsSha256() : context_(std::make_unique<Context>()) {
  if (!context_->digest) throw std::runtime_error("params-sha256: OpenSSL EVP_MD_CTX_new failed");
  check(EVP_DigestInit_ex(context_->digest.get(), EVP_sha256(), nullptr), "EVP_DigestInit_ex");
}

ParamsSha256::~ParamsSha256() = default;

void ParamsSha256::add(const torch::Tensor& tensor) {
  const torch::Tensor bytes = tensor.detach().to(torch::kCPU, torch::kFloat32).contiguous();
  check(EVP_DigestUpdate(context_->digest.get(), bytes.data_ptr(), bytes.numel() * bytes.element_size()),
        "EVP_DigestUpdate");
}

std::string ParamsSha256::hex() {
  unsigned char digest[EVP_MAX_MD_SIZE];
  unsigned int length = 0;
  check(EVP_DigestFinal_ex(context_->digest.get(), digest, &length), "EVP_DigestFinal_ex");
  static const char kHex[] = "0123456789abcdef";
  std::string hex;
  hex.reserve(2 * length);
  for (unsigned int i = 0; i < length; ++i) {
    hex.push_back(kHex[digest[i] >> 4]);
    hex.push_back(kHex[digest[i] & 0xf]);
  }
  return hex;
}

std::string tensors_sha256(const std::vector<std::pair<std::string, torch::Tensor>>& tensors) {
  ParamsSha256 digest;
  for (const auto& item : tensors) digest.add(item.second);
  return digest.hex();
}

}  // namespace fashion_mnist
