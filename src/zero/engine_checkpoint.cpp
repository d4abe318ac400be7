// The ZeRO engine's checkpoint state and full parameters (engine_checkpoint.h).
#include "zero/engine_checkpoint.h"

#include <torch/torch.h>

#include <algorithm>
#include <exception>
#include <map>

#include "cohort/error.h"
#include "core/check.h"
#include "zero/inner_optimizer.h"

namespace cohort::detail {

std::vector<std::pair<std::string, torch::Tensor>> EngineCheckpoint::full_parameters() {
  std::vector<std::pair<std::string, torch::Tensor>> out;
  for_each_full_parameter(
      [&](const std::string& name, const torch::Tensor& value) { out.emplace_back(name, value.clone()); });
  return out;
}

// Where each parameter is: (group, index in it), and each group's last parameter in the module's
// order (named_parameters()), whatever order the groups have (stage 3 puts the root's group first).
EngineCheckpoint::Places EngineCheckpoint::places() const {
  const StateStore& store = parts_.store;
  Places out;
  out.of.resize(size_t(parts_.params.size()));
  out.last.assign(size_t(store.size()), 0);
  for (size_t g = 0; g < out.last.size(); ++g)
    for (size_t k = 0; k < store.layout(int64_t(g)).params.size(); ++k) {
      const auto index = size_t(store.layout(int64_t(g)).params[k]);
      out.of[index] = {g, k};
      out.last[g] = std::max(out.last[g], index);
    }
  return out;
}

torch::Tensor EngineCheckpoint::whole_group(int64_t g, const torch::Tensor& shard) {
  if (!sharded()) return shard;
  torch::Tensor whole = torch::empty({parts_.store.layout(g).padded}, shard.options());
  settings_.comm->allgather_async(whole, shard.contiguous()).wait();
  return whole;
}

// A group is gathered at its first parameter and dropped after its last: the same sequence of gathers
// on every rank.
void EngineCheckpoint::for_each_full_parameter(const ParameterVisitor& visit) {
  const auto& params = parts_.params;
  StateStore& store = parts_.store;
  const Places where = places();
  std::map<size_t, torch::Tensor> gathered;
  for (size_t index = 0; index < where.of.size(); ++index) {
    const auto [g, k] = where.of[index];
    auto found = gathered.find(g);
    if (found == gathered.end()) {
      // Masters on file: lent for the gather, and copied (the lent memory goes back after).
      OptimizerFile& file = store.optimizer_file();
      const bool lend = file.active() && !file.lent(int64_t(g));
      if (lend) file.lend(int64_t(g));
      const torch::Tensor& master = store.master(int64_t(g));
      torch::Tensor whole = whole_group(int64_t(g), master);
      whole = whole.to(torch::kCPU, /*non_blocking=*/false, /*copy=*/store.masters_on_file() && whole.is_same(master));
      if (lend) file.give_back(int64_t(g), /*changed=*/false);
      found = gathered.emplace(g, whole).first;
    }
    const auto& shape = params.shape(int64_t(index));
    visit(params.name(int64_t(index)),
          found->second.narrow(0, store.layout(int64_t(g)).offsets[k], c10::multiply_integers(shape)).view(shape));
    if (index == where.last[g]) gathered.erase(found);
  }
}

void EngineCheckpoint::check_in_memory(const char* what) const {
  COHORT_CHECK_KIND(kInvalidArgument, !parts_.store.optimizer_file().active(), "ZeRO engine: ", what,
                    " needs the optimizer state in memory; this engine keeps it on NVMe (offload_optimizer.device "
                    "nvme)");
}

// Group g's flat master and optimizer state tensors, master first.
std::vector<std::pair<std::string, torch::Tensor>> EngineCheckpoint::group_fields(int64_t g) {
  const torch::Tensor& master = parts_.store.master(g);
  std::vector<std::pair<std::string, torch::Tensor>> out{{"master", master}};
  for (auto& field : state_tensors_of(parts_.optimizer.optimizer(), master)) out.push_back(std::move(field));
  return out;
}

// Parameter k of the group: the elements [begin, end) of it this rank keeps, and where the first of
// them lies in this rank's shard of the group's flat tensors (its whole flat tensor when not sharded).
EngineCheckpoint::Kept EngineCheckpoint::kept(const GroupLayout& layout, size_t k) const {
  const auto [owned_begin, owned_end] = sharded() ? layout.owned_real(settings_.rank)
                                                  : std::pair<int64_t, int64_t>{0, layout.numel};
  const int64_t base = sharded() ? layout.owned(settings_.rank).first : 0;  // the shard's [0] in the group
  const int64_t first = layout.offsets[k], last = first + c10::multiply_integers(parts_.params.shape(layout.params[k]));
  const int64_t lo = std::min(std::max(owned_begin, first), last), hi = std::max(std::min(owned_end, last), lo);
  return {lo - first, hi - first, hi > lo ? lo - base : 0};
}

std::vector<ParameterState> EngineCheckpoint::parameter_states() {
  check_in_memory("parameter_states()");
  StateStore& store = parts_.store;
  std::vector<ParameterState> out(size_t(parts_.params.size()));
  for (int64_t g = 0; g < store.size(); ++g) {
    const GroupLayout& layout = store.layout(g);
    const auto fields = group_fields(g);
    for (size_t k = 0; k < layout.params.size(); ++k) {
      const int64_t index = layout.params[k];
      ParameterState& state = out[size_t(index)];
      state.name = parts_.params.name(index);
      state.shape = parts_.params.shape(index);
      const Kept range = kept(layout, k);
      state.begin = range.begin;
      state.end = range.end;
      for (const auto& [field, flat] : fields)
        state.fields.emplace_back(field, flat.narrow(0, range.at, range.end - range.begin));
    }
  }
  return out;
}

void EngineCheckpoint::for_each_whole_parameter_state(const ParameterStateVisitor& visit) {
  check_in_memory("for_each_whole_parameter_state()");
  const Places where = places();
  std::map<size_t, std::vector<std::pair<std::string, torch::Tensor>>> gathered;
  for (size_t index = 0; index < where.of.size(); ++index) {
    const auto [g, k] = where.of[index];
    auto found = gathered.find(g);
    if (found == gathered.end()) {
      auto fields = group_fields(int64_t(g));
      for (auto& field : fields) field.second = whole_group(int64_t(g), field.second);
      found = gathered.emplace(g, std::move(fields)).first;
    }
    ParameterState state;
    state.name = parts_.params.name(int64_t(index));
    state.shape = parts_.params.shape(int64_t(index));
    state.end = c10::multiply_integers(state.shape);
    for (const auto& [field, whole] : found->second)
      state.fields.emplace_back(field, whole.narrow(0, parts_.store.layout(int64_t(g)).offsets[k], state.end));
    visit(state);
    if (index == where.last[g]) gathered.erase(found);
  }
}

std::pair<int, int> EngineCheckpoint::shard_position() const {
  return sharded() ? std::pair<int, int>{settings_.rank, settings_.world} : std::pair<int, int>{0, 1};
}

// Pretrained weights: each group's masters this rank keeps (lent when on file), read by parameter.
void EngineCheckpoint::read_group(int64_t g, const ParameterReader& read) {
  StateStore& store = parts_.store;
  const GroupLayout& layout = store.layout(g);
  OptimizerFile& file = store.optimizer_file();
  const bool lend = file.active() && !file.lent(g);
  if (lend) file.lend(g);
  const torch::Tensor& master = store.master(g);
  for (size_t k = 0; k < layout.params.size(); ++k) {
    const int64_t index = layout.params[k];
    const Kept range = kept(layout, k);
    torch::Tensor slice = master.narrow(0, range.at, range.end - range.begin);
    torch::Tensor host = slice.is_cpu() ? slice : torch::empty({slice.numel()}, slice.options().device(torch::kCPU));
    if (read(parts_.params.name(index), parts_.params.shape(index), range.begin, host) && !host.is_same(slice))
      slice.copy_(host);
  }
  if (lend) file.give_back(g, /*changed=*/true);
}

void EngineCheckpoint::agree_on_failure(const std::exception_ptr& failure) const {
  torch::Tensor failed = torch::full({1}, failure ? 1.0 : 0.0);
  if (settings_.comm && settings_.world > 1) failed = settings_.comm->allreduce(failed);
  if (settings_.replicate) failed = settings_.replicate->allreduce(failed);
  if (failure) std::rethrow_exception(failure);  // this rank's own error, as it was thrown
  const int count = int(failed.item<double>());
  COHORT_CHECK_KIND(kIO, count == 0, "ZeRO engine: load_full_parameters failed on ", count,
                    " other rank(s) (their errors say why); this rank's parameters are partly loaded");
}

void EngineCheckpoint::load_full_parameters(const ParameterReader& read) {
  torch::NoGradGuard no_grad;
  std::exception_ptr failure;
  try {
    for (int64_t g = 0; g < parts_.store.size(); ++g) read_group(g, read);
    // Frozen parameters and buffers are whole on every rank.
    auto read_whole = [&](const std::string& name, const torch::Tensor& live) {
      torch::Tensor host = torch::empty({live.numel()}, live.options().device(torch::kCPU));
      if (read(name, live.sizes().vec(), 0, host)) live.copy_(host.view(live.sizes()));
    };
    for (const auto& item : parts_.module.named_parameters())
      if (!item.value().requires_grad()) read_whole(item.key(), item.value());
    for (const auto& item : parts_.module.named_buffers()) read_whole(item.key(), item.value());
  } catch (...) {
    failure = std::current_exception();
  }
  agree_on_failure(failure);  // before the all-gather below, which a failed rank would never reach
  parts_.store.zero_gradients();
  parts_.store.zero_master_padding();
  parts_.optimizer.write_back_and_gather();
}

void EngineCheckpoint::prepare_load() { parts_.optimizer.create_states(); }

// Group g's master and optimizer state. On file they are out of memory between lends: listed as meta
// tensors of part g (dtype and shape only), lent to the checkpoint layer one group at a time.
void EngineCheckpoint::add_group(int64_t g, bool meta, std::vector<StateTensor>& out) {
  const GroupLayout& layout = parts_.store.layout(g);
  const std::string prefix = "group" + std::to_string(g) + ".";
  // The real elements this rank owns (padding is not state: it changes with the world size).
  auto add = [&](const std::string& name, const torch::Tensor& t) {
    StateTensor entry;
    entry.name = prefix + name;
    int64_t real = layout.numel;
    entry.kind = StateKind::kReplicated;
    if (settings_.stage != 0) {
      auto [begin, end] = layout.owned_real(settings_.rank);
      real = end - begin;
      entry.kind = StateKind::kSharded;
      entry.flat_numel = layout.numel;
      entry.offset = begin;
    }
    entry.tensor = meta ? torch::empty({real}, t.options().device(torch::kMeta)) : t.narrow(0, 0, real);
    entry.part = meta ? g : -1;
    out.push_back(std::move(entry));
  };
  const torch::Tensor& master = parts_.store.master(g);
  add("master", master);
  for (const auto& [name, state] : state_tensors_of(parts_.optimizer.optimizer(), master)) add(name, state);
}

std::vector<StateTensor> EngineCheckpoint::state_tensors() {
  const bool on_file = parts_.store.optimizer_file().active();
  std::vector<StateTensor> out;
  for (int64_t g = 0; g < parts_.store.size(); ++g) add_group(g, on_file, out);
  // Frozen parameters and buffers stay whole on every rank.
  for (const auto& item : parts_.module.named_parameters())
    if (!item.value().requires_grad()) out.push_back({"module." + item.key(), item.value(), StateKind::kReplicated});
  for (const auto& item : parts_.module.named_buffers())
    out.push_back({"module." + item.key(), item.value(), StateKind::kReplicated});
  return out;
}

std::vector<StateTensor> EngineCheckpoint::lend_part(int64_t g) {
  OptimizerFile& file = parts_.store.optimizer_file();
  COHORT_CHECK_KIND(kInvalidArgument, file.active() && g >= 0 && g < parts_.store.size(), "ZeRO engine: no part ", g,
                    " to lend (",
                    file.active() ? std::to_string(parts_.store.size()) + " groups on file" : "nothing on file", ")");
  // The checkpoint layer asks for the groups in order: read the next ones while this one is used.
  file.prefetch_after(g);
  file.lend(g);
  std::vector<StateTensor> out;
  add_group(g, /*meta=*/false, out);
  return out;
}

void EngineCheckpoint::give_back_part(int64_t g, bool changed) {
  OptimizerFile& file = parts_.store.optimizer_file();
  if (file.active() && g >= 0 && g < parts_.store.size()) file.give_back(g, changed);
}

StateValues EngineCheckpoint::state_values() const {
  StateValues values;
  values["zero_stage"] = settings_.stage;
  parts_.optimizer.save(values);
  return values;
}

void EngineCheckpoint::load_state_values(const StateValues& values) {
  const auto saved = values.find("zero_stage");
  const int saved_stage = saved == values.end() ? settings_.stage : int(saved->second);
  COHORT_CHECK_KIND(kInvalidArgument, saved_stage == settings_.stage, "ZeRO engine: the checkpoint was saved at stage ",
                    saved_stage, " but this engine runs stage ", settings_.stage);
  parts_.optimizer.load(values);
  // The master weights were loaded: derive the compute-precision parameters from them.
  torch::NoGradGuard no_grad;
  parts_.store.zero_gradients();             // gradients of before the load mean nothing now
  parts_.store.zero_master_padding();        // whatever the previous world size left there
  parts_.optimizer.write_back_and_gather();  // masters on file: a group at a time
}

}  // namespace cohort::detail
