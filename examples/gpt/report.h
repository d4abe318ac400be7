// What the GPT example prints besides its header: each validation's loss with a memory line beside it
// (peak resident memory of this rank and of the largest rank, the model states the strategy holds per
// rank now, and what cohort-plan predicts for them), and at the end a sample of text and params-sha256,
// both made one unit at a time (Trainer::for_each_full_parameter) so no rank ever holds the whole model.
#pragma once

#include <cohort/trainer.h>

#include <string>

#include "models/gpt.h"
#include "text.h"
#include "train.h"

namespace gpt_example {

/// "step N: train loss X, val loss Y" (rank 0) and the memory line after each validation.
struct ValidationReport : cohort::Callback {
  explicit ValidationReport(const Flags& flags) : flags_(flags) {}
  void on_validation_end(cohort::Trainer& trainer, cohort::TrainingModule&) override;
  Flags flags_;
};

/// "step N: train loss X, val loss Y" on rank 0.
void print_validation(cohort::Trainer& trainer, double val_loss);

/// The memory line, "memory at <when>: ..." on rank 0 (a collective: every rank calls it).
void print_memory(cohort::Trainer& trainer, const Flags& flags, const std::string& when);

/// The end of a run: `flags.sample_tokens` bytes of text sampled on every rank, each forward run by
/// `run` (through the Trainer: one unit gathered at a time under zero3/fsdp, the stages in turn under
/// --pp), printed by rank 0, then "params-sha256: ..." (every rank calls it).
void print_sample_and_digest(cohort::Trainer& trainer, cohort::models::GPT& gpt, const Text& text, const Flags& flags,
                             const cohort::models::GPTImpl::ForwardRunner& run);

}  // namespace gpt_example
