#ifndef DCP_TRAIN_TRAINER_INPUTS_H_
#define DCP_TRAIN_TRAINER_INPUTS_H_

// How trainer.cc turns one task of a rank's plan into the tensors its model
// runs: the task's samples from the synthetic corpus, packed, with their
// loss weights. Private to //train:trainer.

#include <vector>

#include "absl/status/statusor.h"
#include "train/corpus.h"
#include "train/rank_plan.h"
#include "train/transformer.h"

namespace dcp::train::trainer_inputs {

/// The plan's loss weights of `task`, or each sample's length over the
/// step's tokens when the plan carries none. INVALID_ARGUMENT when the
/// weights do not match the samples, or when there are none and no step
/// token count to derive them from.
absl::StatusOr<std::vector<double>> LossWeights(const RankPlan& plan,
                                                const RankTask& task);

/// `task`'s inputs and targets, packed back to back as its lengths say, in
/// the shape and dtype `model` takes (token ids for a causal model, else
/// `corpus`'s features). Only the samples this rank's shard overlaps are
/// read from `corpus`; the others stay zeros, which ShardTask cuts away.
/// INVALID_ARGUMENT when the samples, lengths and total disagree.
absl::StatusOr<PackedTask> Materialise(const RankPlan& plan,
                                       const RankTask& task,
                                       const SyntheticCorpus& corpus,
                                       const TransformerOptions& model);

}  // namespace dcp::train::trainer_inputs

#endif  // DCP_TRAIN_TRAINER_INPUTS_H_
