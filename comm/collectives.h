#ifndef DCP_COMM_COLLECTIVES_H_
#define DCP_COMM_COLLECTIVES_H_

// Running collectives on c10d process groups with errors as statuses: what
// c10d throws becomes a status a caller can act on (`IsPeerLoss`,
// comm/peer_loss.h), its message naming the collective. Includes torch's
// c10d headers: keep it out of headers that do not need them.

#include <exception>
#include <string>

#include "absl/functional/function_ref.h"
#include "absl/status/status.h"
#include "absl/strings/string_view.h"
#include "absl/types/span.h"
#include "torch/csrc/distributed/c10d/ProcessGroup.hpp"

namespace dcp {

/// The exception's message, without c10's backtrace.
std::string ExceptionText(const std::exception& e);

/// Whether a failure's text says it timed out ("timeout", "timed out", in
/// any case): what c10d and Gloo say of a peer that did not answer in time.
bool SaysTimedOut(absl::string_view text);

/// Runs one collective: `start` issues it over a group, this waits for it.
/// What c10d throws while it runs (a peer gone, a timeout) becomes
/// DEADLINE_EXCEEDED when it timed out and UNAVAILABLE otherwise, both peer
/// losses to `IsPeerLoss`, with the message "`what` failed: <c10d's text>";
/// what `start` throws (c10d refused the arguments, nothing was sent) is
/// INVALID_ARGUMENT, "`what` could not start: ...", not a peer loss.
absl::Status RunCollective(
    const std::string& what,
    absl::FunctionRef<c10::intrusive_ptr<c10d::Work>()> start);

/// Sums `values` (host doubles, in place) over `group`; every member calls
/// it with as many values. `RunCollective`'s errors, naming the group's
/// size. For small host-side figures (counts, a loss); tensors go through
/// `RunCollective` directly.
absl::Status AllReduceSum(c10d::ProcessGroup& group, absl::Span<double> values);

}  // namespace dcp

#endif  // DCP_COMM_COLLECTIVES_H_
