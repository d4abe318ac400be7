// hvd::elastic::State (include/cohort/horovod_elastic.h): model, optimizer and user values as one byte
// string (a torch archive: "model", "optimizer", and "values" = the pickled tuple (commits, name 1,
// value 1, ...)). commit() keeps the bytes in memory and rank 0 writes them through SafeFile (atomic,
// never following a planted link); restore() loads them back; sync() broadcasts rank 0's bytes.
#include <torch/serialize.h>
#include <torch/serialize/input-archive.h>
#include <torch/serialize/output-archive.h>

#include <csignal>
#include <cstdlib>
#include <filesystem>

#include "core/check.h"
#include "core/safe_file.h"
#include "horovod/context.h"
#include "horovod/elastic_state.h"

namespace cohort::hvd::elastic {
namespace {

constexpr const char* kFile = "hvd-elastic-state.pt";

std::string directory_of(const StateOptions& options) {
  if (!options.directory().empty()) return options.directory();
  const char* env = std::getenv("COHORT_HVD_ELASTIC_DIR");
  COHORT_CHECK_KIND(kInvalidArgument, env != nullptr && *env != '\0',
                    "hvd::elastic::State: no directory for the commits; name one in "
                    "StateOptions().directory(...) or in COHORT_HVD_ELASTIC_DIR (a commit must outlive the processes)");
  return env;
}

torch::Tensor bytes_tensor(const std::string& bytes) {
  auto tensor = torch::empty({int64_t(bytes.size())}, torch::kUInt8);
  std::copy(bytes.begin(), bytes.end(), reinterpret_cast<char*>(tensor.data_ptr<uint8_t>()));
  return tensor;
}

// Test hook for "a rank dies right after a commit": COHORT_TEST_KILL_AFTER_COMMIT=<rank>:<n> SIGKILLs
// that rank when its n-th commit of the first attempt has returned (docs/horovod.md).
void maybe_kill_after_commit(int rank, int64_t commits) {
  const char* spec = std::getenv("COHORT_TEST_KILL_AFTER_COMMIT");
  const char* restart = std::getenv("TORCHELASTIC_RESTART_COUNT");
  if (spec == nullptr || (restart != nullptr && std::string(restart) != "0")) return;
  const std::string text(spec);
  const auto colon = text.find(':');
  if (colon == std::string::npos) return;
  if (std::atoi(text.substr(0, colon).c_str()) == rank && std::atoll(text.c_str() + colon + 1) == commits)
    std::raise(SIGKILL);
}

}  // namespace

State::State(std::shared_ptr<torch::nn::Module> model, std::shared_ptr<torch::optim::Optimizer> optimizer,
             std::vector<std::pair<std::string, c10::IValue>> values, StateOptions options)
    : impl_(std::make_unique<Impl>()) {
  COHORT_CHECK_KIND(kInvalidArgument, model != nullptr, "hvd::elastic::State: the model is null");
  COHORT_CHECK_KIND(kInvalidArgument, optimizer != nullptr, "hvd::elastic::State: the optimizer is null");
  for (size_t i = 0; i < values.size(); ++i)
    for (size_t j = 0; j < i; ++j)
      COHORT_CHECK_KIND(kInvalidArgument, values[i].first != values[j].first, "hvd::elastic::State: the value '",
                        values[i].first, "' is given twice");
  impl_->model = std::move(model);
  impl_->optimizer = std::move(optimizer);
  impl_->values = std::move(values);
  impl_->path = (std::filesystem::path(directory_of(options)) / kFile).string();
}

State::~State() = default;

c10::IValue& State::operator[](const std::string& name) {
  for (auto& [key, value] : impl_->values)
    if (key == name) return value;
  std::string known;
  for (const auto& entry : impl_->values) known += (known.empty() ? "" : ", ") + entry.first;
  throw cohort::Error(cohort::detail::str("hvd::elastic::State['", name, "']: no such value; the State was made with: ",
                                          known.empty() ? "none" : known),
                      cohort::ErrorKind::kInvalidArgument);
}

std::string State::Impl::serialize() const {
  torch::serialize::OutputArchive archive, model_archive, optimizer_archive;
  model->save(model_archive);
  optimizer->save(optimizer_archive);
  archive.write("model", model_archive);
  archive.write("optimizer", optimizer_archive);
  std::vector<c10::IValue> items{c10::IValue(commits)};
  for (const auto& [name, value] : values) {
    items.emplace_back(name);
    items.push_back(value);
  }
  const std::vector<char> pickled = torch::pickle_save(c10::ivalue::Tuple::create(std::move(items)));
  archive.write("values", bytes_tensor(std::string(pickled.begin(), pickled.end())));
  std::string bytes;
  archive.save_to([&](const void* data, size_t size) {
    bytes.append(static_cast<const char*>(data), size);
    return size;
  });
  return bytes;
}

void State::Impl::load(const std::string& bytes, const std::string& what) {
  torch::serialize::InputArchive archive, model_archive, optimizer_archive;
  torch::Tensor pickled;
  try {
    archive.load_from(bytes.data(), bytes.size());
    archive.read("model", model_archive);
    archive.read("optimizer", optimizer_archive);
    archive.read("values", pickled);
  } catch (const c10::Error& error) {
    const std::string text = error.what_without_backtrace();
    throw cohort::Error(
        cohort::detail::str("hvd::elastic::State: ", what, " is not a commit (", text.substr(0, text.find('\n')), ")"),
        cohort::ErrorKind::kIO);
  }
  const auto* begin = reinterpret_cast<const char*>(pickled.data_ptr<uint8_t>());
  const auto tuple = torch::pickle_load(std::vector<char>(begin, begin + pickled.numel())).toTuple();
  const auto& items = tuple->elements();  // a view into the tuple on LibTorch 2.x: the tuple stays alive
  std::vector<std::pair<std::string, c10::IValue>> loaded;
  for (size_t i = 1; i + 1 < items.size(); i += 2) loaded.emplace_back(items[i].toStringRef(), items[i + 1]);
  // The program's values and the commit's must be the same names: a renamed value is a different program.
  std::string mine, theirs;
  for (const auto& entry : values) mine += (mine.empty() ? "" : ", ") + entry.first;
  for (const auto& entry : loaded) theirs += (theirs.empty() ? "" : ", ") + entry.first;
  COHORT_CHECK_KIND(kDesync, mine == theirs, "hvd::elastic::State: ", what, " holds the values (", theirs,
                    ") but the State has (", mine, "); a commit restores into a State made with the same names");
  model->load(model_archive);
  optimizer->load(optimizer_archive);
  values = std::move(loaded);
  commits = items.at(0).toInt();
}

void State::commit() {
  const int rank = hvd::rank();
  ++impl_->commits;
  impl_->committed = impl_->serialize();
  if (rank == 0) {
    std::filesystem::create_directories(std::filesystem::path(impl_->path).parent_path());
    // What a commit killed before its rename left (hostile pass 16, M-2), once per State.
    if (!impl_->swept) cohort::detail::remove_stale_temporaries(impl_->path);
    impl_->swept = true;
    cohort::detail::write_file_safely(impl_->path, impl_->committed);
  }
  hvd::barrier();  // rank 0's file is in place before any rank goes on
  maybe_kill_after_commit(rank, impl_->commits);
}

void State::restore() {
  COHORT_CHECK_KIND(kInvalidArgument, !impl_->committed.empty(),
                    "hvd::elastic::State::restore(): nothing was committed or synced yet");
  impl_->load(impl_->committed, "the last commit");
}

void State::sync() {
  std::string bytes = hvd::rank() == 0 ? impl_->serialize() : std::string();
  if (hvd::size() > 1) {
    auto size = hvd::broadcast(torch::tensor({int64_t(bytes.size())}), 0, "hvd.elastic.sync.size");
    auto data = hvd::rank() == 0 ? bytes_tensor(bytes) : torch::empty({size[0].item<int64_t>()}, torch::kUInt8);
    data = hvd::broadcast(data, 0, "hvd.elastic.sync.bytes");
    bytes.assign(reinterpret_cast<const char*>(data.data_ptr<uint8_t>()), size_t(data.numel()));
    if (hvd::rank() != 0) impl_->load(bytes, "rank 0's state");
  }
  impl_->committed = std::move(bytes);
}

void State::register_reset_callbacks(const std::vector<std::function<void()>>& callbacks) {
  impl_->callbacks.insert(impl_->callbacks.end(), callbacks.begin(), callbacks.end());
}

void State::on_reset() {
  for (const auto& callback : impl_->callbacks) callback();
}

int64_t State::commits() const { return impl_->commits; }
const std::string& State::path() const { return impl_->path; }

}  // namespace cohort::hvd::elastic
