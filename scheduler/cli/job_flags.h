#ifndef DCP_SCHEDULER_CLI_JOB_FLAGS_H_
#define DCP_SCHEDULER_CLI_JOB_FLAGS_H_

#include "scheduler/cli/job_config.h"

namespace dcp {

/// The `JobConfig` flags, defined once for every main that links this
/// library: --lengths, --format, --column, --model, --model_config,
/// --world_size, --window, --tokens_per_step, --seed, --balance_steps,
/// --profile and --cluster_config. Only mains depend on it (BUILD visibility);
/// libraries take a `JobConfig`.
JobConfig JobConfigFromFlags();

}  // namespace dcp

#endif  // DCP_SCHEDULER_CLI_JOB_FLAGS_H_
