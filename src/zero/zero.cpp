// cohort::ZeroEngineCore: the public face of the engine; ZeroEngineImpl (zero/engine_impl.h) owns
// the parts that do the work, and each call here reaches the one it belongs to.
#include "cohort/zero.h"

#include "zero/engine_impl.h"
#include "zero/parameter_state.h"

namespace cohort {

ZeroEngineCore::ZeroEngineCore(std::shared_ptr<torch::nn::Module> module, ZeroConfig config, EngineOptions options)
    : impl_(std::make_unique<detail::ZeroEngineImpl>(std::move(module), std::move(config), std::move(options))) {}
ZeroEngineCore::~ZeroEngineCore() = default;
ZeroEngineCore::ZeroEngineCore(ZeroEngineCore&&) noexcept = default;
ZeroEngineCore& ZeroEngineCore::operator=(ZeroEngineCore&&) noexcept = default;

void ZeroEngineCore::backward(const torch::Tensor& loss) { impl_->backward(loss); }
void ZeroEngineCore::step() { impl_->step(); }
void ZeroEngineCore::sum_tied_gradient(const std::string& name, Comm& comm) { impl_->sum_tied_gradient(name, comm); }
bool ZeroEngineCore::is_gradient_accumulation_boundary() const { return impl_->shard_optimizer().at_boundary(); }
int64_t ZeroEngineCore::global_steps() const { return impl_->shard_optimizer().global_steps(); }
int64_t ZeroEngineCore::skipped_steps() const { return impl_->shard_optimizer().skipped_steps(); }
bool ZeroEngineCore::last_step_skipped() const { return impl_->shard_optimizer().last_step_skipped(); }
double ZeroEngineCore::loss_scale() const { return impl_->shard_optimizer().loss_scale(); }
double ZeroEngineCore::lr() const { return impl_->shard_optimizer().next_lr(); }
double ZeroEngineCore::last_gradient_norm() const { return impl_->shard_optimizer().last_gradient_norm(); }
torch::Dtype ZeroEngineCore::compute_dtype() const { return impl_->compute_dtype(); }
int ZeroEngineCore::stage() const { return impl_->stage(); }
const ZeroConfig& ZeroEngineCore::config() const { return impl_->config(); }
MemoryReport ZeroEngineCore::memory_report() const { return impl_->memory_report(); }
torch::optim::Optimizer& ZeroEngineCore::optimizer() { return impl_->shard_optimizer().optimizer(); }
std::shared_ptr<Stateful> ZeroEngineCore::parameter_state() { return detail::engine_parameter_state(*this); }
std::vector<std::pair<std::string, torch::Tensor>> ZeroEngineCore::full_parameters() {
  return impl_->checkpoint().full_parameters();
}
void ZeroEngineCore::for_each_full_parameter(const ParameterVisitor& visit) {
  impl_->checkpoint().for_each_full_parameter(visit);
}
void ZeroEngineCore::load_full_parameters(const ParameterReader& read) {
  impl_->checkpoint().load_full_parameters(read);
}
std::vector<ParameterState> ZeroEngineCore::parameter_states() { return impl_->checkpoint().parameter_states(); }
void ZeroEngineCore::for_each_whole_parameter_state(const ParameterStateVisitor& visit) {
  impl_->checkpoint().for_each_whole_parameter_state(visit);
}
std::pair<int, int> ZeroEngineCore::shard_position() const { return impl_->checkpoint().shard_position(); }
void ZeroEngineCore::prepare_load() { impl_->checkpoint().prepare_load(); }
std::vector<StateTensor> ZeroEngineCore::state_tensors() { return impl_->checkpoint().state_tensors(); }
std::vector<StateTensor> ZeroEngineCore::lend_part(int64_t part) { return impl_->checkpoint().lend_part(part); }
void ZeroEngineCore::give_back_part(int64_t part, bool changed) { impl_->checkpoint().give_back_part(part, changed); }
StateValues ZeroEngineCore::state_values() const { return impl_->checkpoint().state_values(); }
void ZeroEngineCore::load_state_values(const StateValues& values) { impl_->checkpoint().load_state_values(values); }
ZeroEngineCore::ForwardScope::ForwardScope(ZeroEngineCore& engine) : impl_(*engine.impl_) { impl_.begin_forward(); }
ZeroEngineCore::ForwardScope::~ForwardScope() { impl_.end_forward(); }
torch::Tensor ZeroEngineCore::to_compute(const torch::Tensor& t) const { return impl_->to_compute(t); }

}  // namespace cohort
