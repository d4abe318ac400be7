// cohort::load_pretrained (cohort/safetensors.h) and its tensor-parallel form (checkpoint/pretrained.h):
// a SafetensorsSource read by range, into a module's tensors directly or through
// ZeroEngineCore::load_full_parameters into each rank's shards.
#include "checkpoint/pretrained.h"

#include <torch/torch.h>

#include <set>

#include "checkpoint/safetensors_source.h"
#include "cohort/error.h"
#include "core/check.h"
#include "core/text.h"

namespace cohort {
namespace detail {
namespace {

// Strict: a tensor under the prefix that no name of the model asked for is refused.
void check_all_used(const SafetensorsSource& source, const std::set<std::string>& used, const StateDictOptions& options,
                    const std::string& after) {
  if (!options.strict()) return;
  for (const std::string& key : source.names()) {
    const bool under_prefix = key.compare(0, options.prefix().size(), options.prefix()) == 0;
    COHORT_CHECK_KIND(kInvalidArgument, !under_prefix || used.count(key), source.path(), ": tensor '", excerpt(key),
                      "' names nothing in the model (strict; StateDictOptions().strict(false) ignores it)", after);
  }
}

// Elements [begin, begin + out.numel()) of this rank's tensor `name` (of `shape` here): straight from
// the file, or, for a part, its runs in the whole tensor (else cut from the whole tensor read once).
void read_local(const SafetensorsSource& source, const std::string& key, const std::vector<int64_t>& shape,
                int64_t begin, torch::Tensor out, const std::optional<LocalPart>& part) {
  if (!part) return source.read(key, shape, begin, std::move(out));
  if (part->runs) {
    if (out.numel() == 0) return source.read(key, part->whole_shape, 0, std::move(out));  // checks name and shape
    for (const PartRun& run : part->runs(begin, begin + out.numel()))
      source.read(key, part->whole_shape, run.whole, out.narrow(0, run.local - begin, run.count));
    return;
  }
  torch::Tensor whole = torch::empty(part->whole_shape, out.options());
  source.read(key, part->whole_shape, 0, whole.view({-1}));
  if (out.numel() > 0) out.copy_(part->cut(whole).reshape({-1}).narrow(0, begin, out.numel()));
}

// The file's key for the module's tensor `name`, nothing when options.module_prefix leaves it out.
std::optional<std::string> key_of(const std::string& name, const StateDictOptions& options) {
  const std::string& under = options.module_prefix();
  if (name.compare(0, under.size(), under) != 0) return std::nullopt;
  return options.prefix() + name.substr(under.size());
}

}  // namespace

void load_pretrained_parts(torch::nn::Module& module, const std::string& path, const StateDictOptions& options,
                           const LocalParts& parts) {
  const SafetensorsSource source(path);
  std::vector<std::pair<std::string, torch::Tensor>> targets;  // (file key, module tensor)
  std::vector<std::string> names;
  auto add = [&](const std::string& name, const torch::Tensor& tensor) {
    if (const auto key = key_of(name, options)) {
      targets.emplace_back(*key, tensor);
      names.push_back(name);
    }
  };
  for (const auto& item : module.named_parameters()) add(item.key(), item.value());
  for (const auto& item : module.named_buffers()) add(item.key(), item.value());
  // Every name and shape first, so that a mismatch changes nothing: an empty range checks them.
  std::set<std::string> used;
  std::vector<std::optional<LocalPart>> part_of;
  for (size_t i = 0; i < targets.size(); ++i) {
    const auto& [key, target] = targets[i];
    part_of.push_back(parts ? parts(names[i], target.sizes().vec()) : std::nullopt);
    const auto& shape = part_of.back() ? part_of.back()->whole_shape : target.sizes().vec();
    source.read(key, shape, 0, torch::empty({0}, target.options().device(torch::kCPU)));
    used.insert(key);
  }
  check_all_used(source, used, options, "");
  torch::NoGradGuard no_grad;
  for (size_t i = 0; i < targets.size(); ++i) {
    const auto& [key, target] = targets[i];
    // Straight into the tensor's own storage when it is a contiguous CPU tensor, else through one buffer.
    const bool direct = target.is_cpu() && target.is_contiguous();
    torch::Tensor into = direct ? target.view({-1})
                                : torch::empty({target.numel()}, target.options().device(torch::kCPU));
    read_local(source, key, target.sizes().vec(), 0, into, part_of[i]);
    if (!direct) target.copy_(into.view(target.sizes()));
  }
}

void load_pretrained_parts(ZeroEngineCore& engine, const std::string& path, const StateDictOptions& options,
                           const LocalParts& parts) {
  const SafetensorsSource source(path);
  std::set<std::string> used;
  engine.load_full_parameters(
      [&](const std::string& name, const std::vector<int64_t>& shape, int64_t begin, torch::Tensor out) {
        const auto key = key_of(name, options);
        if (!key) return false;  // left as it is
        used.insert(*key);
        read_local(source, *key, shape, begin, std::move(out), parts ? parts(name, shape) : std::nullopt);
        return true;
      });
  check_all_used(source, used, options, "; the model's own tensors were loaded");
}

}  // namespace detail

std::map<std::string, std::string> safetensors_metadata(const std::string& path) {
  return detail::SafetensorsSource(path).metadata();
}

void load_pretrained(torch::nn::Module& module, const std::string& path, const StateDictOptions& options) {
  detail::load_pretrained_parts(module, path, options, nullptr);
}

void load_pretrained(ZeroEngineCore& engine, const std::string& path, const StateDictOptions& options) {
  detail::load_pretrained_parts(engine, path, options, nullptr);
}

}  // namespace cohort
