// dcp-ctl: asks a running dcp-scheduler for its status, or drains/stops it.
//
//   dcp-ctl --scheduler=127.0.0.1:50051 status
//   dcp-ctl --scheduler=127.0.0.1:50051 --json status
//   dcp-ctl --scheduler=127.0.0.1:50051 drain   # stop planning, keep serving
//   dcp-ctl --scheduler=127.0.0.1:50051 stop    # drain, then exit
//   dcp-ctl --scheduler=10.0.0.1:50051 --tls_ca=ca.crt --tls_cert=ctl.crt
//     --tls_key=ctl.key --job_id=run-7 status  # a scheduler with mutual TLS
//
// Takes the security flags of the agent (common/security_flags.h):
// plaintext only to loopback unless --insecure.

#include <algorithm>
#include <cstdio>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "absl/flags/flag.h"
#include "absl/flags/parse.h"
#include "absl/flags/usage.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/time/time.h"
#include "common/grpc_credentials.h"
#include "common/grpc_status.h"
#include "common/security_flags.h"
#include "common/status_macros.h"
#include "google/protobuf/util/json_util.h"
#include "grpcpp/client_context.h"
#include "proto/scheduler_service.grpc.pb.h"

ABSL_FLAG(std::string, scheduler, "127.0.0.1:50051",
          "host:port of the dcp-scheduler.");
ABSL_FLAG(bool, json, false, "Print the reply as JSON.");
ABSL_FLAG(absl::Duration, timeout, absl::Seconds(10), "Deadline of the call.");

namespace dcp {
namespace {

std::string Percent(double fraction) {
  return absl::StrFormat("%.1f%%", 100 * fraction);
}

/// The status as a table a person can read at a glance.
std::string FormatStatus(const v1::StatusResponse& s) {
  std::string out =
      absl::StrFormat("session %s   epoch %d   model %s   world %d\n",
                      s.session_id(), s.epoch(), s.model(), s.world_size());
  absl::StrAppendFormat(
      &out, "steps   planned %d   completed %d   draining %s%s\n",
      s.planned_steps(), s.completed_steps(), s.draining() ? "yes" : "no",
      s.stopping() ? "   stopping" : "");
  absl::StrAppendFormat(&out, "store   %d keys, %d bytes\n", s.store_keys(),
                        s.store_bytes());
  absl::StrAppendFormat(
      &out, "ranks   live %d of %d   failures %d   %s\n", s.live_ranks(),
      s.world_size(), s.rank_failures(),
      s.on_rank_failure().empty()
          ? std::string("failure detection off (--rank_timeout=0)")
      : s.on_rank_failure() == "hold"
          ? absl::StrCat("policy hold", s.holding()
                                            ? ": HOLDING, no new step until "
                                              "the failed ranks return"
                                            : "")
          : absl::StrFormat("policy shrink: epoch world %d ranks, %d steps "
                            "abandoned and re-planned",
                            s.epoch_world_size(), s.abandoned_steps()));
  absl::StrAppendFormat(
      &out,
      "model   task error %s unseen, %s on the window (last refit %s -> %s, "
      "%s on the %d observations since)   step error %s (sync %s)   refits "
      "%d   timing reports %d   observations %d\n",
      Percent(s.unseen_task_error()), Percent(s.model_error()),
      Percent(s.refit_error_before()), Percent(s.refit_error_after()),
      Percent(s.refit_error_since()), s.observations_since_refit(),
      Percent(s.step_error()), Percent(s.sync_error()), s.refits(),
      s.timing_reports(), s.observations());
  if (!s.planner_error().empty()) {
    absl::StrAppendFormat(&out, "PLANNER ERROR: %s\n", s.planner_error());
  }
  absl::StrAppendFormat(
      &out, "\n%5s  %-20s %4s %8s  %-9s %6s %9s %5s %8s  %s\n", "rank", "host",
      "gpu", "pid", "connected", "sent", "reported", "lag", "idle_s", "state");
  for (const v1::RankStatus& r : s.ranks()) {
    if (!r.registered()) {
      absl::StrAppendFormat(&out, "%5d  %-20s\n", r.rank(), "(not registered)");
      continue;
    }
    const char* state = r.failed()    ? "FAILED"
                        : !r.member() ? "live (joins next epoch)"
                                      : "live";
    absl::StrAppendFormat(
        &out, "%5d  %-20s %4d %8d  %-9s %6d %9d %5d %8.1f  %s\n", r.rank(),
        r.host(), r.gpu(), r.pid(), r.connected() ? "yes" : "no",
        r.last_sent_step(), r.last_reported_step(), r.lag_steps(),
        r.idle_seconds(), state);
  }
  std::vector<std::pair<std::string, double>> coefficients(
      s.coefficients().begin(), s.coefficients().end());
  std::sort(coefficients.begin(), coefficients.end());
  out += "\ncoefficients\n";
  for (const auto& [name, value] : coefficients) {
    absl::StrAppendFormat(&out, "  %-20s %.6g\n", name, value);
  }
  return out;
}

absl::StatusOr<std::string> ToJson(const google::protobuf::Message& message) {
  google::protobuf::util::JsonPrintOptions options;
  options.add_whitespace = true;
  options.always_print_primitive_fields = true;
  options.preserve_proto_field_names = true;
  std::string json;
  const auto status =
      google::protobuf::util::MessageToJsonString(message, &json, options);
  if (!status.ok()) {
    return absl::InternalError(
        absl::StrCat("cannot print JSON: ", status.ToString()));
  }
  return json;
}

absl::Status Run(const std::string& command) {
  if (command != "status" && command != "drain" && command != "stop") {
    return absl::InvalidArgumentError(absl::StrCat(
        "unknown command '", command, "': expected status, drain or stop"));
  }
  const SecurityOptions security = SecurityOptionsFromFlags();
  ASSIGN_OR_RETURN(
      std::shared_ptr<grpc::Channel> channel,
      CreateSecureChannel(absl::GetFlag(FLAGS_scheduler), security));
  auto stub = v1::Scheduler::NewStub(channel);
  grpc::ClientContext context;
  context.set_deadline(
      std::chrono::system_clock::now() +
      absl::ToChronoMilliseconds(absl::GetFlag(FLAGS_timeout)));
  const bool json = absl::GetFlag(FLAGS_json);

  if (command == "status") {
    v1::StatusResponse status;
    RETURN_IF_ERROR(WithConnectionHint(
        FromGrpcStatus(stub->GetStatus(&context, v1::StatusRequest(), &status)),
        security));
    if (json) {
      ASSIGN_OR_RETURN(std::string text, ToJson(status));
      std::printf("%s", text.c_str());
    } else {
      std::printf("%s", FormatStatus(status).c_str());
    }
    return absl::OkStatus();
  }

  v1::DrainRequest request;
  request.set_stop(command == "stop");
  v1::DrainResponse response;
  RETURN_IF_ERROR(WithConnectionHint(
      FromGrpcStatus(stub->Drain(&context, request, &response)), security));
  if (json) {
    ASSIGN_OR_RETURN(std::string text, ToJson(response));
    std::printf("%s", text.c_str());
  } else if (response.last_step() < 0) {
    std::printf("%s: no step was planned; streams end now\n",
                request.stop() ? "stopping" : "draining");
  } else {
    std::printf("%s: the last step is %lld; streams end after it\n",
                request.stop() ? "stopping (the scheduler exits once drained)"
                               : "draining",
                static_cast<long long>(response.last_step()));
  }
  return absl::OkStatus();
}

}  // namespace
}  // namespace dcp

int main(int argc, char** argv) {
  absl::SetProgramUsageMessage(absl::StrCat(
      "Controls a running dcp-scheduler.\n"
      "  dcp-ctl --scheduler=HOST:PORT [--json] status|drain|stop\n",
      dcp::kSecurityFlagsUsage));
  std::vector<char*> args = absl::ParseCommandLine(argc, argv);
  if (args.size() != 2) {
    std::fprintf(stderr,
                 "usage: dcp-ctl --scheduler=HOST:PORT [--json] "
                 "status|drain|stop\n");
    return 2;
  }
  absl::Status s = dcp::Run(args[1]);
  if (!s.ok()) {
    std::fprintf(stderr, "dcp-ctl: %s\n", s.ToString().c_str());
    return 1;
  }
  return 0;
}
