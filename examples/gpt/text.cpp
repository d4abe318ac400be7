// The example's text and windows (see text.h). The text is read whole, from regular files only and up
// to a size (kMaxTextBytes), so --data naming a device or a fifo is one line, not a hang or bad_alloc.
#include "text.h"

#include <cohort/error.h>

#include <algorithm>
#include <cstdint>
#include <filesystem>
#include <sstream>
#include <stdexcept>
#include <vector>

#include "../common/cli_paths.h"

namespace gpt_example {
namespace {

namespace fs = std::filesystem;

// The text is read whole and each byte becomes an 8-byte token, held twice while the tensor is made:
// 256 MiB of text already takes about 4.5 GB. nanoGPT's character-level texts are about 1 MB; a larger
// corpus wants a tokenizer and a memory-mapped file, not this example.
constexpr int64_t kMaxTextBytes = int64_t(256) << 20;

// A directory's files without a '.' in their name (the fortune files, not their .dat indexes), in
// name order, and at most kMaxTextBytes in all.
std::vector<fs::path> text_files(const std::string& dir) {
  std::vector<fs::path> files;
  uintmax_t total = 0;
  for (const auto& entry : fs::directory_iterator(dir))
    if (entry.is_regular_file() && !entry.is_symlink() && entry.path().filename().string().find('.') == std::string::npos) {
      files.push_back(entry.path());
      total += entry.file_size();
    }
  if (total > static_cast<uintmax_t>(kMaxTextBytes))
    throw cohort::Error("--data " + dir + ": its " + std::to_string(files.size()) + " text files hold " +
                            std::to_string(total) + " bytes, more than the " + std::to_string(kMaxTextBytes) +
                            " this program reads whole into memory",
                        cohort::ErrorKind::kInvalidArgument);
  std::sort(files.begin(), files.end());
  return files;
}

}  // namespace

Text load_text(const std::string& path, int64_t min_tokens) {
  Text text;
  std::error_code error;
  if (fs::is_directory(path, error)) {
    const std::vector<fs::path> files = text_files(path);
    for (const auto& file : files) text.bytes += examples::read_regular_file("--data", file.string(), kMaxTextBytes);
    text.files = static_cast<int>(files.size());
  } else if (fs::exists(path, error)) {
    text.bytes = examples::read_regular_file("--data", path, kMaxTextBytes);
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
