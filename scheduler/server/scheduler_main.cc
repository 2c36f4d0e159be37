// dcp-scheduler: the control-plane daemon. Plans steps ahead of the agents,
// streams each rank its part, learns from their timings, and keeps the
// rendezvous store; see proto/scheduler_service.proto.
//
//   dcp-scheduler --lengths=data/lengths/wikipedia.txt --model=llama3-8b
//     --world_size=32 --window=131072 --tokens_per_step=2097152
//     --listen=0.0.0.0:50051 --port_file=/tmp/dcp.port
//     --metrics_listen=0.0.0.0:9464
//     --tls_cert=scheduler.crt --tls_key=scheduler.key --tls_ca=ca.crt
//     --job_id=run-7
//
// The gRPC port is plaintext only on loopback (or with --insecure); give
// --tls_cert/--tls_key for TLS, and --tls_ca for mutual TLS (agents and
// dcp-ctl must present a certificate that CA signed). --auth_token_file
// requires a bearer token on every request, --job_id that every request
// names this job (common/security_flags.h has the flags).
//
// Prometheus metrics (dcp_scheduler_*, listed in README.md) are served on
// http://<--metrics_listen>/metrics, or https:// with --metrics_tls_cert and
// --metrics_tls_key (--metrics_tls_ca: scrapers need a client certificate).
//
// SIGINT/SIGTERM drain and stop (the daemon exits once every plan stream has
// ended); a second signal exits at once.
//
// With --state_dir=DIR the job survives the daemon: plans, accepted reports,
// refits and rendezvous keys are fsync'd there before they take effect, and
// a daemon restarted on DIR (with the job's flags) resumes the job in the
// same session (README.md, "Durable state").

#include <atomic>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <string>
#include <vector>

#include "absl/cleanup/cleanup.h"
#include "absl/flags/flag.h"
#include "absl/flags/parse.h"
#include "absl/flags/usage.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "common/current_build_info.h"
#include "common/file_util.h"
#include "common/metrics/metrics.h"
#include "common/metrics/metrics_http.h"
#include "common/metrics/metrics_server_flags.h"
#include "common/metrics/metrics_tls_flags.h"
#include "common/model_spec.h"
#include "common/security_flags.h"
#include "common/signal_watcher.h"
#include "common/status_macros.h"
#include "scheduler/cli/job_config.h"
#include "scheduler/cli/job_flags.h"
#include "scheduler/control/control_plane.h"
#include "scheduler/control/file_state_store.h"
#include "scheduler/planner/cost_model.h"
#include "scheduler/server/scheduler_metrics.h"
#include "scheduler/server/scheduler_server.h"

ABSL_FLAG(int, gpus_per_node, 0,
          "GPUs per node: groups within a node use the intra-node links (0 = "
          "the --cluster_config's, 8 for the built-ins).");
ABSL_FLAG(int, lookahead_steps, 4,
          "Steps planned ahead of the last step every rank has reported.");
ABSL_FLAG(int64_t, max_steps, 0,
          "Stop planning after this many steps and drain (0 = unlimited).");
ABSL_FLAG(bool, profile_at_start, false,
          "Before step 0, have every agent profile the attention layer over a "
          "grid (ProfileRequest) and refit the cost model from it.");
ABSL_FLAG(std::vector<std::string>, profile_lengths, {},
          "With --profile_at_start: the sequence lengths of the profile grid, "
          "comma-separated (default: 256, 1024, ... x4 and the window; a grid "
          "to a long window costs minutes a rank, `dcp-bench` prints the "
          "cost: set --profile_timeout above it).");
ABSL_FLAG(absl::Duration, profile_timeout, absl::Seconds(60),
          "With --profile_at_start: how long after the first registration to "
          "wait for every rank's profile before planning without the rest.");
ABSL_FLAG(int, refit_every, 64,
          "Refit the cost model after this many new task observations.");
ABSL_FLAG(double, refit_error, 0.25,
          "Also refit at every completed step while the task times reported "
          "since the last refit are off by more than this on average, as the "
          "model predicted them (0: off): a far-off prior learns every "
          "step.");
ABSL_FLAG(int, observation_window, 512,
          "Most recent task observations a refit uses.");
ABSL_FLAG(int, step_error_window, 64,
          "Most recent completed steps whose predicted-vs-measured step time "
          "error is averaged (the step error of logs, status and metrics).");
ABSL_FLAG(int, sync_window, 64,
          "Most recent completed steps whose measured gradient sync the "
          "refits learn the sync term from.");
ABSL_FLAG(int, fanout_threads, -1,
          "Threads that write woken plan streams off the planner thread: -1 "
          "auto (cores / 4, at most 8, on hosts with 8+ cores; else none), 0 "
          "none, N threads.");
ABSL_FLAG(double, prior_weight, 1.0,
          "Pseudo-observations pulling each coefficient towards the initial "
          "model in a refit.");
ABSL_FLAG(std::string, listen, "0.0.0.0:50051",
          "host:port to serve on; port 0 picks a free port. Without "
          "--tls_cert, an address other than loopback needs --insecure.");
ABSL_FLAG(std::string, port_file, "",
          "Write the bound port to this file once serving (for scripts).");
ABSL_FLAG(int64_t, max_message_bytes, 4 << 20,
          "Largest request the scheduler accepts, in bytes.");
// The default port is Prometheus' registry entry for no exporter in
// particular (the OpenTelemetry exporters' 9464); see the flag's help.
constexpr char kDefaultMetricsListen[] = "0.0.0.0:9464";
ABSL_FLAG(std::string, metrics_listen, kDefaultMetricsListen,
          "host:port serving Prometheus metrics on /metrics (IPv4, "
          "localhost or [IPv6]; port 0 picks a free port; empty: no "
          "metrics; HTTPS with --metrics_tls_cert/--metrics_tls_key). When the "
          "default port is taken the scheduler warns and runs without "
          "metrics; any other address that cannot be bound is an error.");
ABSL_FLAG(std::string, metrics_port_file, "",
          "Write the bound metrics port to this file once serving.");
ABSL_FLAG(std::string, state_dir, "",
          "Directory of the job's durable state (created if missing): plans, "
          "accepted reports, refits and rendezvous keys, each fsync'd "
          "before it takes effect. A scheduler restarted on it resumes the "
          "job (same session; steps planned but not completed are served "
          "again as planned). Empty: nothing survives a restart.");
ABSL_FLAG(absl::Duration, rank_timeout, absl::Seconds(60),
          "A rank whose plan stream is gone and that has not been heard from "
          "for this long, or that has not reported a step this long after "
          "every other rank of its world did, is declared failed (0 "
          "disables detection).");
ABSL_FLAG(absl::Duration, step_timeout, absl::ZeroDuration(),
          "A rank whose plan stream is open but that has reported nothing "
          "for this long while owing a step it was sent is declared failed "
          "(stalled), even when no other rank reported the step either (a "
          "whole world stuck in a collective). Set it above the longest "
          "step; 0 (the default) disables it.");
ABSL_FLAG(std::string, on_rank_failure, "hold",
          "What a failed rank does to the job. hold: plan no new step until "
          "it registers again; shrink: a new epoch for the remaining ranks, "
          "the steps not completed re-planned for them (a rank that returns "
          "is in the world again from the next step; execute-mode agents "
          "and client_lib trainers re-form their groups over each epoch's "
          "ranks). With --state_dir each epoch change is durable and "
          "survives a restart.");
ABSL_FLAG(absl::Duration, stop_grace, absl::Seconds(30),
          "After a stop, how long to wait for plan streams to end.");

namespace dcp {
namespace {

std::string Now() {
  return absl::FormatTime("%Y-%m-%d %H:%M:%E3S", absl::Now(),
                          absl::LocalTimeZone());
}

void LogStep(const PlannedStepEvent& e) {
  std::fprintf(
      stderr,
      "%s step %lld (epoch %lld): %lld samples, %lld tokens, %d "
      "tasks, %d groups, predicted %.3f s, planned in %.1f ms\n",
      Now().c_str(), static_cast<long long>(e.step),
      static_cast<long long>(e.epoch), static_cast<long long>(e.samples),
      static_cast<long long>(e.tokens), e.tasks, e.groups, e.predicted_seconds,
      absl::ToDoubleMilliseconds(e.planning_time));
}

void LogRefit(const RefitEvent& e) {
  std::fprintf(
      stderr,
      "%s refit %lld over %lld observations: task error %.1f%% -> %.1f%% "
      "(%s; the model replaced was %.1f%% off on the %lld reported since it "
      "was installed), step error %.1f%% (sync %.1f%%, %s)\n",
      Now().c_str(), static_cast<long long>(e.refits),
      static_cast<long long>(e.observations), 100 * e.error_before,
      100 * e.error_after,
      e.kept_current ? "kept the current model: the fit was no better"
                     : "installed the fit",
      100 * e.replaced_error_since,
      static_cast<long long>(e.replaced_observations_since),
      100 * e.step_error, 100 * e.sync_error,
      e.kept_current_sync ? "kept the current sync"
                          : "installed the fitted sync");
}

void LogProfileDone(const ProfileDoneEvent& e) {
  if (e.timed_out) {
    std::fprintf(stderr,
                 "%s profile timed out: ranks [%s] did not answer; planning "
                 "with %lld observations from ranks [%s]\n",
                 Now().c_str(), absl::StrJoin(e.missing, ",").c_str(),
                 static_cast<long long>(e.observations),
                 absl::StrJoin(e.answered, ",").c_str());
  } else {
    std::fprintf(stderr,
                 "%s profile done: %zu ranks answered, %lld observations\n",
                 Now().c_str(), e.answered.size(),
                 static_cast<long long>(e.observations));
  }
}

/// Logs requests refused for their token or job id: the first 20, then
/// one in 1000, so that a stranger hammering the port cannot flood the log.
void LogRefused(absl::string_view method, const absl::Status& status) {
  static std::atomic<int64_t> refused{0};
  const int64_t n = ++refused;
  if (n > 20 && n % 1000 != 0) return;
  std::fprintf(stderr, "%s refused a %s request (%lld so far): %s\n",
               Now().c_str(), std::string(method).c_str(),
               static_cast<long long>(n), status.ToString().c_str());
}

void LogRankEvent(const RankFailureEvent& e) {
  const std::string members = absl::StrJoin(e.members, ",");
  if (e.returned >= 0) {
    std::fprintf(stderr,
                 "%s rank %d returned (registered again): %s; %d ranks live\n",
                 Now().c_str(), e.returned,
                 e.policy == "hold"
                     ? (e.holding ? "still holding: other ranks are failed"
                                  : "hold ends, the job goes on")
                     : absl::StrCat("it joins the world [", members,
                                    "] with the next epoch, at the next "
                                    "step planned")
                           .c_str(),
                 e.live_ranks);
    return;
  }
  const std::string failed = absl::StrJoin(e.failed, ",");
  const std::string why = absl::StrJoin(e.reasons, "; ");
  if (e.policy == "hold") {
    std::fprintf(stderr,
                 "%s rank failure: ranks [%s] failed (%s); holding: no new "
                 "step is planned until they register again; %d ranks live\n",
                 Now().c_str(), failed.c_str(), why.c_str(), e.live_ranks);
    return;
  }
  std::fprintf(
      stderr,
      "%s rank failure: ranks [%s] failed (%s); shrink: epoch %lld on ranks "
      "[%s]; steps [%lld, %lld) abandoned, their %lld samples planned again "
      "from step %lld on\n",
      Now().c_str(), failed.c_str(), why.c_str(),
      static_cast<long long>(e.epoch), members.c_str(),
      static_cast<long long>(e.abandoned_from),
      static_cast<long long>(e.abandoned_to),
      static_cast<long long>(e.reserved_samples),
      static_cast<long long>(e.abandoned_to));
}

void LogResumed(const ResumeEvent& e) {
  std::fprintf(
      stderr,
      "%s dcp-scheduler: resumed session %s (epoch %lld): steps "
      "[0, %lld) completed, [%lld, %lld) served again as planned "
      "(%lld of their reports kept), the cost model after %lld "
      "refits, %lld rendezvous keys\n",
      Now().c_str(), e.session_id.c_str(), static_cast<long long>(e.epoch),
      static_cast<long long>(e.completed_steps),
      static_cast<long long>(e.completed_steps),
      static_cast<long long>(e.planned_steps),
      static_cast<long long>(e.reports), static_cast<long long>(e.refits),
      static_cast<long long>(e.store_keys));
}

/// The store of --state_dir, and what opening it found, logged; null (and
/// a note that a restart starts over) without the flag.
absl::StatusOr<std::unique_ptr<FileStateStore>> OpenStateDir() {
  const std::string dir = absl::GetFlag(FLAGS_state_dir);
  if (dir.empty()) {
    std::fprintf(stderr,
                 "%s dcp-scheduler: no --state_dir: the job's state lives in "
                 "memory only, and a restart of this scheduler starts the "
                 "job over (a new session the running agents cannot join)\n",
                 Now().c_str());
    return nullptr;
  }
  FileStateStoreOptions options;
  options.dir = dir;
  ASSIGN_OR_RETURN(std::unique_ptr<FileStateStore> store,
                   FileStateStore::Open(options));
  const StateRecovery& found = store->recovery();
  const std::string what =
      found.existed ? absl::StrCat(found.records, " records read") : "new";
  std::fprintf(stderr, "%s dcp-scheduler: state in %s: %s\n", Now().c_str(),
               dir.c_str(), what.c_str());
  if (found.dropped_bytes > 0) {
    std::fprintf(stderr,
                 "%s dcp-scheduler: warning: cut off the last %lld bytes of "
                 "%s, not trusted: %s\n",
                 Now().c_str(), static_cast<long long>(found.dropped_bytes),
                 FileStateStore::LogPath(dir).c_str(),
                 found.tail_problem.c_str());
  }
  return store;
}

/// --profile_lengths as numbers; empty for the default grid.
absl::StatusOr<std::vector<int64_t>> ProfileLengthsFromFlag() {
  std::vector<int64_t> lengths;
  for (const std::string& text : absl::GetFlag(FLAGS_profile_lengths)) {
    int64_t length = 0;
    if (!absl::SimpleAtoi(text, &length) || length <= 0) {
      return absl::InvalidArgumentError(absl::StrCat(
          "--profile_lengths: '", text, "' is not a positive integer"));
    }
    lengths.push_back(length);
  }
  return lengths;
}

absl::StatusOr<SchedulerServerOptions> OptionsFromFlags() {
  const JobConfig job = JobConfigFromFlags();
  SchedulerServerOptions options;
  options.listen_address = absl::GetFlag(FLAGS_listen);
  options.security = SecurityOptionsFromFlags();
  options.on_refused = LogRefused;
  options.stop_grace = absl::GetFlag(FLAGS_stop_grace);
  options.fanout_threads = absl::GetFlag(FLAGS_fanout_threads);
  ControlPlaneOptions& cp = options.control_plane;
  cp.world_size = job.world_size;
  ASSIGN_OR_RETURN(cp.cluster, LoadClusterFlag(job.cluster_config,
                                               BazelWorkingDirectory()));
  if (absl::GetFlag(FLAGS_gpus_per_node) != 0) {
    cp.cluster.gpus_per_node = absl::GetFlag(FLAGS_gpus_per_node);
  }
  cp.window = job.window;
  cp.tokens_per_step = job.tokens_per_step;
  cp.seed = job.seed;
  cp.lookahead_steps = absl::GetFlag(FLAGS_lookahead_steps);
  cp.balance_steps = job.balance_steps;
  cp.max_steps = absl::GetFlag(FLAGS_max_steps);
  cp.refit_every = absl::GetFlag(FLAGS_refit_every);
  cp.refit_error = absl::GetFlag(FLAGS_refit_error);
  cp.observation_window = absl::GetFlag(FLAGS_observation_window);
  cp.prior_weight = absl::GetFlag(FLAGS_prior_weight);
  cp.sync_window = absl::GetFlag(FLAGS_sync_window);
  cp.step_error_window = absl::GetFlag(FLAGS_step_error_window);
  cp.max_message_bytes = absl::GetFlag(FLAGS_max_message_bytes);
  cp.profile_at_start = absl::GetFlag(FLAGS_profile_at_start);
  cp.profile_timeout = absl::GetFlag(FLAGS_profile_timeout);
  ASSIGN_OR_RETURN(cp.profile_lengths, ProfileLengthsFromFlag());
  cp.rank_timeout = absl::GetFlag(FLAGS_rank_timeout);
  cp.step_timeout = absl::GetFlag(FLAGS_step_timeout);
  const std::string policy = absl::GetFlag(FLAGS_on_rank_failure);
  if (policy == "hold") {
    cp.on_rank_failure = RankFailurePolicy::kHold;
  } else if (policy == "shrink") {
    cp.on_rank_failure = RankFailurePolicy::kShrink;
  } else {
    return absl::InvalidArgumentError(absl::StrCat(
        "--on_rank_failure must be hold or shrink, not '", policy, "'"));
  }
  if (cp.rank_timeout < absl::ZeroDuration()) {
    return absl::InvalidArgumentError("--rank_timeout must be >= 0");
  }
  if (cp.step_timeout < absl::ZeroDuration()) {
    return absl::InvalidArgumentError("--step_timeout must be >= 0");
  }
  if (cp.cluster.gpus_per_node <= 0) {
    return absl::InvalidArgumentError("--gpus_per_node must be positive");
  }
  ASSIGN_OR_RETURN(LoadedJob loaded, LoadJob(job, cp.cluster, cp.prior_weight,
                                             BazelWorkingDirectory()));
  cp.model = std::move(loaded.model);
  cp.lengths = std::move(loaded.lengths);
  cp.cost_model = std::move(loaded.cost_model);
  cp.on_step_planned = LogStep;
  cp.on_refit = LogRefit;
  cp.on_profile_done = LogProfileDone;
  cp.on_resumed = LogResumed;
  cp.on_rank_event = LogRankEvent;
  return options;
}

/// Serves `registry` on --metrics_listen and writes --metrics_port_file;
/// null when metrics are off (or the default port is taken).
absl::StatusOr<std::unique_ptr<MetricsHttpServer>> StartMetricsServer(
    MetricsRegistry* registry) {
  const std::string listen = absl::GetFlag(FLAGS_metrics_listen);
  MetricsHttpServerOptions options;
  options.listen_address = listen;
  options.registry = registry;
  options.tls = MetricsTlsOptionsFromFlags();
  RETURN_IF_ERROR(ApplyMetricsServerLimitFlags(options));
  absl::StatusOr<std::unique_ptr<MetricsHttpServer>> server =
      MetricsHttpServer::Start(options);
  if (absl::IsUnavailable(server.status()) && listen == kDefaultMetricsListen) {
    // Another scheduler (or exporter) on this host has the default port:
    // run on without metrics rather than refuse to schedule.
    std::fprintf(stderr,
                 "%s dcp-scheduler: warning: no metrics: %s (pass "
                 "--metrics_listen=HOST:PORT, or empty to turn them off)\n",
                 Now().c_str(), server.status().ToString().c_str());
    return nullptr;
  }
  if (!server.ok()) return server.status();
  std::fprintf(stderr, "%s dcp-scheduler: metrics on %s\n", Now().c_str(),
               (*server)->url().c_str());
  if (!absl::GetFlag(FLAGS_metrics_port_file).empty()) {
    RETURN_IF_ERROR(WriteFileAtomically(absl::GetFlag(FLAGS_metrics_port_file),
                                        absl::StrCat((*server)->port(), "\n")));
  }
  return server;
}

// Says how failed ranks are found and handled, or that they are not.
void LogFailureDetection() {
  if (absl::GetFlag(FLAGS_rank_timeout) > absl::ZeroDuration()) {
    const std::string timeout =
        absl::FormatDuration(absl::GetFlag(FLAGS_rank_timeout));
    std::fprintf(stderr,
                 "%s dcp-scheduler: a rank silent for %s without a plan "
                 "stream is declared failed; --on_rank_failure=%s\n",
                 Now().c_str(), timeout.c_str(),
                 absl::GetFlag(FLAGS_on_rank_failure).c_str());
  } else {
    std::fprintf(stderr,
                 "%s dcp-scheduler: --rank_timeout=0: failed ranks are not "
                 "detected (a dead rank stalls the job)\n",
                 Now().c_str());
  }
  if (absl::GetFlag(FLAGS_step_timeout) > absl::ZeroDuration()) {
    std::fprintf(stderr,
                 "%s dcp-scheduler: a rank that reports nothing for %s while "
                 "owing a step (--step_timeout) is declared failed\n",
                 Now().c_str(),
                 absl::FormatDuration(absl::GetFlag(FLAGS_step_timeout))
                     .c_str());
  }
}

// Serves until the job ends or a signal stops it: the first SIGINT/SIGTERM
// drains and stops; a second exits at once.
void ServeUntilStopped(SchedulerServer& server) {
  SchedulerServer* srv = &server;
  SignalWatcher watcher([srv](int signal, int count) {
    if (count == 1) {
      const int64_t last = srv->control_plane().Drain(/*stop=*/true);
      std::fprintf(stderr,
                   "%s signal %d: draining after step %lld, then exiting "
                   "(signal again to exit now)\n",
                   Now().c_str(), signal, static_cast<long long>(last));
    } else {
      std::fprintf(stderr, "%s signal %d: exiting now\n", Now().c_str(),
                   signal);
      srv->control_plane().Shutdown();
    }
  });
  server.Wait();
  server.Shutdown();
}

absl::Status Run() {
  ASSIGN_OR_RETURN(SchedulerServerOptions options, OptionsFromFlags());
  // Outlives the server, whose control plane writes to it.
  ASSIGN_OR_RETURN(std::unique_ptr<FileStateStore> state, OpenStateDir());
  options.control_plane.state_store = state.get();
  const int64_t samples =
      static_cast<int64_t>(options.control_plane.lengths.size());
  const std::string model = options.control_plane.model.name;
  const int world = options.control_plane.world_size;

  // Both outlive the server, whose callbacks and RPC hook they are.
  MetricsRegistry registry;
  std::unique_ptr<SchedulerMetrics> metrics;
  if (!absl::GetFlag(FLAGS_metrics_listen).empty()) {
    ASSIGN_OR_RETURN(metrics, SchedulerMetrics::Create(
                                  &registry, nullptr, CurrentBuildInfo()));
    metrics->Instrument(options);
  }

  SignalWatcher::BlockSignals();
  // Started first, so that a bad --metrics_listen fails before anything
  // runs; its Status() families fill in once the server is up.
  std::unique_ptr<MetricsHttpServer> metrics_server;
  if (metrics != nullptr) {
    ASSIGN_OR_RETURN(metrics_server, StartMetricsServer(&registry));
  }
  ASSIGN_OR_RETURN(std::unique_ptr<SchedulerServer> server,
                   SchedulerServer::Start(std::move(options)));
  std::fprintf(stderr,
               "%s dcp-scheduler: session %s, listening on %s (%s); %s on "
               "%d ranks, %lld samples\n",
               Now().c_str(), server->control_plane().session_id().c_str(),
               server->address().c_str(), server->security().c_str(),
               model.c_str(), world, static_cast<long long>(samples));
  LogFailureDetection();
  if (metrics != nullptr) {
    SchedulerServer* srv = server.get();
    metrics->SetStatusSource([srv] { return srv->control_plane().Status(); });
  }
  // On every way out, stop serving before `server` goes: no scrape may read
  // a control plane that is gone.
  absl::Cleanup stop_metrics = [&metrics_server] {
    if (metrics_server != nullptr) metrics_server->Shutdown();
  };
  if (!absl::GetFlag(FLAGS_port_file).empty()) {
    RETURN_IF_ERROR(WriteFileAtomically(absl::GetFlag(FLAGS_port_file),
                                        absl::StrCat(server->port(), "\n")));
  }
  ServeUntilStopped(*server);
  const v1::StatusResponse status = server->control_plane().Status();
  std::fprintf(stderr,
               "%s dcp-scheduler: exiting; %lld steps planned, %lld "
               "completed, %lld refits, task error %.1f%%\n",
               Now().c_str(), static_cast<long long>(status.planned_steps()),
               static_cast<long long>(status.completed_steps()),
               static_cast<long long>(status.refits()),
               100 * status.model_error());
  return absl::OkStatus();
}

}  // namespace
}  // namespace dcp

int main(int argc, char** argv) {
  absl::SetProgramUsageMessage(
      "The dcp scheduler daemon: plans steps and streams them to agents.\n"
      "  dcp-scheduler --lengths=FILE --model=NAME --world_size=N "
      "--window=TOKENS\n"
      "    --tokens_per_step=T --listen=HOST:PORT [--port_file=FILE] "
      "[--max_steps=S]\n"
      "    [--metrics_listen=HOST:PORT] [--metrics_port_file=FILE] "
      "[--state_dir=DIR]\n"
      "    [--metrics_tls_cert=PEM --metrics_tls_key=PEM "
      "[--metrics_tls_ca=PEM]]\n"
      "    [--metrics_max_connections=N] [--metrics_connection_timeout=D]\n"
      "    [--tls_cert=PEM --tls_key=PEM [--tls_ca=PEM]] "
      "[--auth_token_file=FILE] [--job_id=ID] [--insecure]");
  absl::ParseCommandLine(argc, argv);
  // Debian's Abseil is built with the mutex deadlock detector on: it
  // records every lock order in a global graph, a few % of the scheduler's
  // CPU at a thousand agents. The tests keep it.
  absl::SetMutexDeadlockDetectionMode(absl::OnDeadlockCycle::kIgnore);
  absl::Status s = dcp::Run();
  if (!s.ok()) {
    std::fprintf(stderr, "dcp-scheduler: %s\n", s.ToString().c_str());
    return 1;
  }
  return 0;
}
