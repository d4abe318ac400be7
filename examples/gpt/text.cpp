// The example's text and windows (see text.h).
#include "text.h"

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <sstream>
#include <stdexcept>
#include <vector>

namespace gpt_example {
namespace {

namespace fs = std::filesystem;

std::string read_file(const fs::path& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) throw std::runtime_error("--data: cannot read " + path.string());
  return std::string(std::istreambuf_iterator<char>(in), {});
}

}  // namespace

Text load_text(const std::string& path, int64_t min_tokens) {
  Text text;
  std::error_code error;
  if (fs::is_directory(path, error)) {
    std::vector<fs::path> files;
    for (const auto& entry : fs::directory_iterator(path))
      if (entry.is_regular_file() && !entry.is_symlink() && entry.path().filename().string().find('.') == std::string::npos)
        files.push_back(entry.path());
    std::sort(files.begin(), files.end());
    for (const auto& file : files) text.bytes += read_file(file);
    text.files = static_cast<int>(files.size());
  } else if (fs::exists(path, error)) {
    text.bytes = read_file(path);
    text.files = 1;
  } else {
    throw std::runtime_error("--data: " + path + " does not exist" +
                             (path == kDefaultText ? " (install Debian's fortunes package: scripts/install-deps.sh)" : ""));
  }
  text.token_of.fill(-1);
  for (unsigned char c : text.bytes) text.token_of[c] = 0;
  for (int c = 0; c < 256; ++c)
    if (text.token_of[c] == 0) {
      text.token_of[c] = static_cast<int64_t>(text.vocabulary.size());
      text.vocabulary.push_back(static_cast<char>(c));
    }
  std::vector<int64_t> tokens(text.bytes.size());
  for (size_t i = 0; i < tokens.size(); ++i) tokens[i] = text.token_of[static_cast<unsigned char>(text.bytes[i])];
  const int64_t n = static_cast<int64_t>(tokens.size()), split = n * 9 / 10;
  if (n - split < min_tokens) {
    std::ostringstream message;
    message << "--data: " << path << " holds " << n << " bytes; its last 10% (validation) must hold at least "
            << min_tokens << " (block_size + 1)";
    throw std::runtime_error(message.str());
  }
  auto all = torch::tensor(tokens, torch::kLong);
  text.train = all.narrow(0, 0, split);
  text.val = all.narrow(0, split, n - split);
  return text;
}

std::string decode(const Text& text, const torch::Tensor& tokens) {
  std::string out;
  auto flat = tokens.to(torch::kCPU).contiguous();
  const int64_t* data = flat.data_ptr<int64_t>();
  for (int64_t i = 0; i < flat.numel(); ++i) out.push_back(text.vocabulary.at(static_cast<size_t>(data[i])));
  return out;
}

std::pair<torch::Tensor, torch::Tensor> windows(const torch::Tensor& tokens, const torch::Tensor& starts, int64_t block) {
  auto offsets = starts.unsqueeze(1) + torch::arange(block, torch::kLong).unsqueeze(0);  // [n, block]
  return {tokens.index_select(0, offsets.reshape(-1)).view_as(offsets),
          tokens.index_select(0, (offsets + 1).reshape(-1)).view_as(offsets)};
}

cohort::Batch WindowDataset::get(int64_t index) const {
  auto [x, y] = windows(tokens_, starts_.narrow(0, index, 1), block_);
  return {x.squeeze(0), y.squeeze(0)};
}

cohort::Batch WindowDataset::get_batch(const torch::Tensor& indices) const {
  auto [x, y] = windows(tokens_, starts_.index_select(0, indices), block_);
  return {x, y};
}

}  // namespace gpt_example
