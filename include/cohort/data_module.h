// cohort::DataModule: Lightning's LightningDataModule for C++. It keeps a job's data in one place:
// what to fetch once per node (prepare_data), what each rank builds for a stage (setup), and the
// loaders of each stage, which Trainer::fit, validate and test take instead of loaders. The Trainer
// shards the loaders over the ranks as it shards loaders given directly. See docs/trainer.md.
//
//   struct Digits : cohort::DataModule {
//     void setup(const std::string& stage) override { data_ = read_dataset(); }
//     std::shared_ptr<cohort::DataLoader> train_dataloader() override {
//       return std::make_shared<cohort::DataLoader>(data_, cohort::LoaderOptions().batch_size(64).shuffle(true));
//     }
//   };
//   trainer.fit(model, digits);
#pragma once

#include <memory>
#include <string>

#include "cohort/data_loader.h"
#include "cohort/export.h"

COHORT_EXPORT_BEGIN
namespace cohort {

class DataModule {
 public:
  virtual ~DataModule() = default;
  /// Once per node, on its local rank 0, before setup (download, unpack, write files); the node's
  /// other ranks wait for it (Lightning's prepare_data with prepare_data_per_node).
  virtual void prepare_data() {}
  /// On every rank, before the loaders are asked for: stage "fit", "validate" or "test".
  virtual void setup(const std::string& stage) {}
  /// The loaders of each stage; null: none. fit needs a training loader (validation runs when
  /// val_dataloader gives one), validate a validation loader, test a test loader. Each is asked
  /// for once per fit / validate / test, and the Trainer keeps it while it runs.
  virtual std::shared_ptr<DataLoader> train_dataloader() { return nullptr; }
  virtual std::shared_ptr<DataLoader> val_dataloader() { return nullptr; }
  virtual std::shared_ptr<DataLoader> test_dataloader() { return nullptr; }
};

}  // namespace cohort
COHORT_EXPORT_END
