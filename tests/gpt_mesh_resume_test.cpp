// examples/gpt's checkpoints across meshes (issue 41, item 5): the Trainer saves the ZeRO engine's
// state by parameter, in each whole tensor's order, so a run on 2 data-parallel x 2 tensor-parallel
// ranks under fsdp resumes on 4 flat fsdp ranks, on one process and on 2 pipeline stages x 2 fsdp
// ranks (the GPT cut into stages, FSDP per stage: the same names), optimizer state included, and ends
// where it would have (the same global batches: --batch-size per data-parallel rank); the pipelined
// run's own checkpoint resumes on one process. The checkpoint consolidated by cohort-ckpt is the
// model PyTorch's twin loads, with the loss of the exported weights.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "gpt_job.h"
#include "launch_helpers.h"
#include "support/python.h"

namespace gpt_mesh_resume_test {

using ::testing::HasSubstr;
using namespace cohort::testing;
using namespace std::chrono_literals;

std::string interop_script() {
  const char* source = std::getenv("COHORT_SOURCE_DIR");
  return std::string(source ? source : ".") + "/tests/python/gpt_interop.py";
}

// gpt_interop.py compare: the two exports within 1e-5.
void expect_same_model(const std::string& a, const std::string& b, const std::string& what) {
  const ProcResult compared = run_process({python_with_torch(), interop_script(), "compare", a, b, "1e-5"}, clean_env(),
                                          120s);
  EXPECT_EQ(compared.code, 0) << what << ": " << compared.describe();
}

// PyTorch's twin's loss on the fixed batch of the weights in `file` under `prefix`.
double python_loss(const GptJob& job, const std::string& file, const std::string& prefix) {
  const ProcResult run = run_process({python_with_torch(), interop_script(), "loss", file, prefix, "2", "2", "16", "16",
                                      std::to_string(job.vocabulary()), "0"},
                                     clean_env(), 120s);
  EXPECT_EQ(run.code, 0) << run.describe();
  const size_t at = run.out.find("loss ");
  return at == std::string::npos ? -1.0 : std::stod(run.out.substr(at + 5));
}

TEST(GptMeshResume, ATensorParallelFsdpCheckpointResumesOnAnyMeshAndConsolidatesForPython) {
  GptJob job;
  const std::string ckpt = job.root + "/ckpt", whole = job.root + "/tp2_fsdp2.safetensors";
  const ProcResult tp = job.run({"--strategy", "fsdp", "--tensor-parallel", "2", "--no-bias", "--checkpoint-dir", ckpt,
                                 "--checkpoint-every", "3", "--export", whole},
                                "4", "4");
  ASSERT_EQ(tp.code, 0) << tp.describe();
  EXPECT_THAT(tp.out, HasSubstr("(2 data parallel x 2 tensor parallel)")) << tp.describe();
  // Resumed at step 3 on 4 flat ranks (2 rows each) and on one process (8 rows): the same 8 rows a step.
  const ProcResult flat = job.run(
      {"--strategy", "fsdp", "--no-bias", "--resume", ckpt + "/step-3", "--export", job.root + "/flat.safetensors"},
      "4", "2");
  ASSERT_EQ(flat.code, 0) << flat.describe();
  EXPECT_THAT(flat.out, HasSubstr("resumed from " + ckpt + "/step-3")) << flat.describe();
  expect_same_model(whole, job.root + "/flat.safetensors", "tp2 x fsdp2 resumed on fsdp 4");
  const ProcResult one = job.run(
      {"--strategy", "fsdp", "--no-bias", "--resume", ckpt + "/step-3", "--export", job.root + "/one.safetensors"}, "1",
      "8");
  ASSERT_EQ(one.code, 0) << one.describe();
  expect_same_model(whole, job.root + "/one.safetensors", "tp2 x fsdp2 resumed on one process");
  // On 2 pipeline stages x 2 fsdp ranks (4 rows each), checkpointing in turn; that resumed on one process.
  const std::string piped = job.root + "/pp2_fsdp2.safetensors", pp_ckpt = job.root + "/pp_ckpt";
  const ProcResult pp = job.run({"--strategy", "fsdp", "--pp", "2", "--no-bias", "--resume", ckpt + "/step-3",
                                 "--checkpoint-dir", pp_ckpt, "--checkpoint-every", "5", "--export", piped},
                                "4", "4");
  ASSERT_EQ(pp.code, 0) << pp.describe();
  EXPECT_THAT(pp.out, HasSubstr("(2 pipeline stages x 2 data parallel)")) << pp.describe();
  EXPECT_THAT(pp.out, HasSubstr("resumed from " + ckpt + "/step-3")) << pp.describe();
  expect_same_model(whole, piped, "tp2 x fsdp2 resumed on pp2 x fsdp2");
  const ProcResult after_pp = job.run(
      {"--strategy", "fsdp", "--no-bias", "--resume", pp_ckpt + "/step-5", "--export", job.root + "/after_pp.safetensors"},
      "1", "8");
  ASSERT_EQ(after_pp.code, 0) << after_pp.describe();
  expect_same_model(whole, job.root + "/after_pp.safetensors", "pp2 x fsdp2's checkpoint resumed on one process");
  // The last checkpoint as one file: each parameter whole under its name; Python's loss is the export's.
  const std::string consolidated = job.root + "/consolidated.safetensors";
  const ProcResult tool = run_process(
      {build_path("/tools/cohort_ckpt/cohort-ckpt"), "consolidate", ckpt, "-o", consolidated}, clean_env(), 120s);
  ASSERT_EQ(tool.code, 0) << tool.describe();
  const double exported = python_loss(job, whole, "-"),
               from_checkpoint = python_loss(job, consolidated, "engine/gpt.*.master");
  EXPECT_GT(exported, 0.0);
  EXPECT_NEAR(from_checkpoint, exported, 1e-6);
}

}  // namespace gpt_mesh_resume_test
