// dcp-agent: the per-rank agent of a dcp job. Registers the rank with the
// dcp-scheduler, receives its plans and forms its process groups, and
// either serves the plans to the training process beside it or runs them
// itself.
//
//   dcp-agent --scheduler=10.0.0.1:50051 --rank=3 --world_size=32
//     --mode=serve --socket=/run/dcp/agent-3.sock
//   dcp-agent --scheduler=127.0.0.1:50051 --rank=3 --world_size=8
//     --mode=execute --model_config=data/models/tiny-llama.json
//     --token_scale=64 --log_file=/tmp/dcp/agent-3.jsonl
//
// serve:   a dcp.v1.Agent gRPC server on a Unix-domain socket for the
//          trainer (client_lib's sidecar mode); exits 0 once the trainer
//          has been told the job is drained.
// execute: trains the model on each step itself, on the CPU
//          (worker_agent/model_executor.h: the transformer of train/,
//          Ulysses sequence parallelism over c10d Gloo groups, the plan's
//          recompute and micro-steps, the world's gradient all-reduce,
//          AdamW), reports the timings and appends one JSON line per task
//          (and one per step, with its loss) to --log_file; exits 0 when
//          the job is drained. --task_clock=cpu times each rank's own CPU
//          work, for ranks that share a host's cores. It follows a
//          shrink or a grow of the world (--on_rank_failure=shrink): the
//          step a dead peer broke is given up, its groups re-formed over
//          the next epoch's ranks, and the state taken from a survivor.
// simulate: as execute, but each task takes --simulate_task_time and
//          nothing is trained (no model, no groups): the steps' reports and
//          log lines without the compute, for control-plane tests and
//          rehearsals; it follows a shrink or a grow of the world.
//
// All modes answer the scheduler's start-up profile (--profile_at_start):
// the agent times real forward and backward passes of the model over the
// request's grid itself, on the CPU over Gloo, with their peak memory
// (ModelExecutor::RunProfile), before any step arrives. That needs the
// model's shape: --model_config, else --model,
// else the scheduler's model when it is built in. Execute mode cannot run
// without it and fails at start-up; serve mode needs it only for the
// profile, so it keeps serving and skips the profile with a warning (the
// scheduler then plans without this rank's profile after its
// --profile_timeout). A --model or --model_config that does not load fails
// either mode at start-up.
//
// The agent's own groups (the ones it forms as steps arrive, in serve mode
// for a trainer that asks for them, in execute mode for its tasks) are c10d
// ProcessGroupGloo groups over --gloo_hostname. A CUDA trainer beside a
// serve-mode agent forms its NCCL groups itself (torch.distributed), meeting
// under each task's rendezvous prefix.
//
// --metrics_listen=HOST:PORT serves Prometheus metrics (dcp_agent_*, listed
// in README.md) on http://HOST:PORT/metrics (https:// with
// --metrics_tls_cert/--metrics_tls_key, client certificates of
// --metrics_tls_ca required); off by default.
//
// The connection to the scheduler is plaintext only to loopback (or with
// --insecure): --tls_ca turns TLS on (the scheduler's certificate must chain
// to it), --tls_cert/--tls_key add the client certificate of mutual TLS,
// --auth_token_file sends the scheduler's bearer token and --job_id the job
// with every call (common/security_flags.h). The serve mode's socket is a
// Unix-domain socket, local to the host: it takes no credentials, and
// whoever may open it (its directory's and file's permissions) acts for
// this rank.
//
// SIGINT/SIGTERM stop the agent (exit code 1: the job was not finished).

#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <memory>
#include <string>
#include <vector>

#include "absl/cleanup/cleanup.h"
#include "absl/flags/flag.h"
#include "absl/flags/parse.h"
#include "absl/flags/usage.h"
#include "absl/strings/str_cat.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "common/current_build_info.h"
#include "common/file_util.h"
#include "common/grpc_credentials.h"
#include "common/metrics/metrics.h"
#include "common/metrics/metrics_http.h"
#include "common/metrics/metrics_server_flags.h"
#include "common/metrics/metrics_tls_flags.h"
#include "common/model_spec.h"
#include "common/process_memory.h"
#include "common/security_flags.h"
#include "common/signal_watcher.h"
#include "common/status_macros.h"
#include "worker_agent/agent.h"
#include "worker_agent/agent_metrics.h"
#include "worker_agent/agent_service.h"
#include "worker_agent/execute_loop.h"
#include "worker_agent/model_executor.h"
#include "worker_agent/report_spool.h"

ABSL_FLAG(std::string, scheduler, "127.0.0.1:50051",
          "host:port of the dcp-scheduler.");
ABSL_FLAG(int, rank, -1, "Global rank of this agent (required).");
ABSL_FLAG(int, world_size, 0,
          "World size the job was started with; 0 accepts the scheduler's.");
ABSL_FLAG(std::string, mode, "execute",
          "execute: run the steps here on the CPU; serve: serve them to a "
          "trainer on --socket; simulate: take each task as "
          "--simulate_task_time long without training (no model, no groups), "
          "log and report it as execute mode does.");
ABSL_FLAG(absl::Duration, simulate_task_time, absl::Milliseconds(10),
          "Simulate mode: how long each task takes.");
ABSL_FLAG(std::string, socket, "",
          "Unix-domain socket path of the serve mode (default "
          "/tmp/dcp-agent-<rank>.sock).");
ABSL_FLAG(std::string, model, "",
          "Built-in model the execute mode and the profile run (default: the "
          "scheduler's, when built in).");
ABSL_FLAG(std::string, model_config, "",
          "Model config JSON the execute mode and the profile run; overrides "
          "--model.");
ABSL_FLAG(int64_t, token_scale, 64,
          "Execute mode and the profile: sequence lengths are divided by "
          "this (rounded up) so that GPU-sized plans run fast on a CPU.");
ABSL_FLAG(std::string, task_clock, "wall",
          "Execute mode and the profile: what tasks are timed on. wall: the "
          "system clock; cpu: this process's CPU time (the rank's own work, "
          "for ranks that share a host's cores).");
ABSL_FLAG(int, torch_threads, 1,
          "Execute mode and the profile: torch's intra-op threads (0: "
          "torch's default).");
ABSL_FLAG(uint64_t, train_seed, 0,
          "Execute mode: seed of the initial weights and of the synthetic "
          "corpus (every rank of a job must use the same).");
ABSL_FLAG(double, learning_rate, 1e-3, "Execute mode: AdamW's learning rate.");
ABSL_FLAG(std::string, log_file, "",
          "Execute mode: append one JSON line per task and per step here.");
ABSL_FLAG(int64_t, max_steps, 0,
          "Execute mode: exit after this many steps (0: run until drained).");
ABSL_FLAG(std::string, host, "",
          "Host name told to the scheduler (default: this machine's).");
ABSL_FLAG(int, gpu, 0, "Local GPU index told to the scheduler.");
ABSL_FLAG(std::string, gloo_hostname, "127.0.0.1",
          "Address the agent's Gloo process groups listen on.");
ABSL_FLAG(absl::Duration, rendezvous_timeout, absl::Seconds(120),
          "Bound on forming a process group and on each collective.");
ABSL_FLAG(absl::Duration, world_timeout, absl::ZeroDuration(),
          "Bound on forming the groups of an epoch after the world changed "
          "(and, in execute mode, on the data-parallel group's all-reduces); "
          "0 = 3 x --rendezvous_timeout. After a shrink the survivors reach "
          "the new world's groups each when its own wait on the dead peer "
          "ends; raise it when they drift further apart.");
ABSL_FLAG(int, prefetch_depth, 4, "Steps received ahead and warmed.");
ABSL_FLAG(absl::Duration, connect_timeout, absl::Seconds(30),
          "How long to wait for the scheduler at start-up.");
ABSL_FLAG(bool, report_stream, true,
          "Send timing reports on one StreamReports stream (false: a "
          "ReportTimings call per step).");
ABSL_FLAG(std::string, metrics_listen, "",
          "host:port serving Prometheus metrics on /metrics (IPv4, "
          "localhost or [IPv6]; port 0 picks a free port; HTTPS with "
          "--metrics_tls_cert/--metrics_tls_key); empty: no metrics.");
ABSL_FLAG(std::string, metrics_port_file, "",
          "Write the bound metrics port to this file once serving.");
ABSL_FLAG(absl::Duration, step_timeout, absl::Minutes(10),
          "Execute mode: how long to wait for the next step.");
ABSL_FLAG(absl::Duration, max_backoff, absl::Seconds(5),
          "Longest sleep between reconnections to the scheduler (the "
          "back-off doubles from 100ms up to this).");
ABSL_FLAG(absl::Duration, max_outage, absl::Minutes(10),
          "How long the scheduler may stay unreachable before the agent "
          "gives up (its trainer's NextStep then fails UNAVAILABLE); "
          "shorter outages are a pause: reports are kept and delivered "
          "once it is back.");
ABSL_FLAG(int, max_pending_reports, 1024,
          "Serve mode: trainer reports kept while the scheduler is "
          "unreachable; beyond this the trainer is answered "
          "RESOURCE_EXHAUSTED.");
ABSL_FLAG(std::string, report_spool_dir, "",
          "Serve mode: a directory where those kept reports are also "
          "written (fsync'd, reports-rank<N>.spool), so that they outlive "
          "the agent: started again on it, the agent delivers them first. "
          "Empty: memory only, lost if the agent exits first.");

namespace dcp {
namespace {

std::string Now() {
  return absl::FormatTime("%Y-%m-%d %H:%M:%E3S", absl::Now(),
                          absl::LocalTimeZone());
}

/// The model the executor runs: --model_config, else --model, else the
/// scheduler's model when it is built in.
absl::StatusOr<ModelSpec> ModelToRun(const std::string& scheduler_model) {
  if (!absl::GetFlag(FLAGS_model_config).empty()) {
    return LoadModelConfig(absl::GetFlag(FLAGS_model_config));
  }
  if (!absl::GetFlag(FLAGS_model).empty()) {
    return BuiltinModel(absl::GetFlag(FLAGS_model));
  }
  absl::StatusOr<ModelSpec> model = BuiltinModel(scheduler_model);
  if (!model.ok()) {
    return absl::FailedPreconditionError(absl::StrCat(
        "running the model (execute mode, profiles) needs its shape: the "
        "scheduler plans for '",
        scheduler_model,
        "', which is not built in; pass --model_config=FILE (or --model)"));
  }
  return model;
}

/// Loads --model_config or --model when given, so that a bad one fails at
/// start-up in either mode rather than at the first profile.
absl::Status CheckModelFlags() {
  if (!absl::GetFlag(FLAGS_model_config).empty()) {
    return LoadModelConfig(absl::GetFlag(FLAGS_model_config)).status();
  }
  if (!absl::GetFlag(FLAGS_model).empty()) {
    return BuiltinModel(absl::GetFlag(FLAGS_model)).status();
  }
  return absl::OkStatus();
}

/// What tasks are timed on (--task_clock).
absl::StatusOr<Clock*> TaskClock() {
  static ProcessCpuClock* const cpu = new ProcessCpuClock();
  const std::string name = absl::GetFlag(FLAGS_task_clock);
  if (name == "wall") return RealClock::Default();
  if (name == "cpu") return cpu;
  return absl::InvalidArgumentError(
      absl::StrCat("--task_clock must be wall or cpu, not '", name, "'"));
}

/// The model executor's options from the flags, for `agent`'s rank.
absl::StatusOr<ModelExecutorOptions> ExecutorOptions(const Agent& agent) {
  ModelExecutorOptions options;
  ASSIGN_OR_RETURN(options.model, ModelToRun(agent.registration().model()));
  options.rank = agent.rank();
  options.world_size = agent.registration().world_size();
  options.session_id = agent.registration().session_id();
  options.token_scale = absl::GetFlag(FLAGS_token_scale);
  options.seed = absl::GetFlag(FLAGS_train_seed);
  options.learning_rate = absl::GetFlag(FLAGS_learning_rate);
  options.group_timeout = absl::GetFlag(FLAGS_rendezvous_timeout);
  options.world_timeout = absl::GetFlag(FLAGS_world_timeout);
  options.hostname = absl::GetFlag(FLAGS_gloo_hostname);
  options.torch_threads = absl::GetFlag(FLAGS_torch_threads);
  ASSIGN_OR_RETURN(options.clock, TaskClock());
  return options;
}

/// Both modes' answer to the scheduler's ProfileRequest: real forward and
/// backward passes over the grid (worker_agent/model_executor.h), on the
/// agent's reader thread, before any step arrives, by an executor of its
/// own (its groups meet under the request's prefixes). Without the model's
/// shape the profile is skipped with a warning (see the file comment).
absl::StatusOr<v1::Profile> RunProfile(Agent& agent,
                                       const v1::ProfileRequest& request,
                                       const GroupResolver& /*groups*/) {
  absl::StatusOr<std::unique_ptr<ModelExecutor>> made =
      [&]() -> absl::StatusOr<std::unique_ptr<ModelExecutor>> {
    ASSIGN_OR_RETURN(ModelExecutorOptions options, ExecutorOptions(agent));
    return ModelExecutor::Create(std::move(options), agent.rendezvous_store());
  }();
  if (!made.ok()) {
    std::fprintf(stderr,
                 "%s dcp-agent rank %d: warning: not answering the "
                 "scheduler's profile request: %s; the scheduler plans "
                 "without this rank's profile after its --profile_timeout\n",
                 Now().c_str(), agent.rank(),
                 std::string(made.status().message()).c_str());
    return made.status();
  }
  // Peak memory per grid point needs freed memory to leave the process.
  MakeResidentMemoryFollowAllocations();
  const absl::Time start = absl::Now();
  absl::StatusOr<v1::Profile> profile = (*made)->RunProfile(request);
  if (profile.ok()) {
    std::fprintf(stderr, "%s dcp-agent rank %d: profiled %d entries in %s\n",
                 Now().c_str(), agent.rank(), profile->entries_size(),
                 absl::FormatDuration(absl::Now() - start).c_str());
  } else {
    std::fprintf(stderr, "%s dcp-agent rank %d: profile failed: %s\n",
                 Now().c_str(), agent.rank(),
                 profile.status().ToString().c_str());
  }
  return profile;
}

/// Execute mode: the flags into `ExecuteLoopOptions`, then the loop
/// (worker_agent/execute_loop.h). `metrics` may be null (no
/// --metrics_listen).
absl::Status Execute(Agent& agent, const SignalWatcher& watcher,
                     AgentMetrics* metrics) {
  ExecuteLoopOptions options;
  if (absl::GetFlag(FLAGS_mode) != "simulate") {
    ASSIGN_OR_RETURN(options.executor, ExecutorOptions(agent));
  }
  if (metrics != nullptr) {
    options.executor.on_group_formed = [metrics](absl::Duration d) {
      metrics->OnGroupFormed(d);
    };
  }
  options.log_file = absl::GetFlag(FLAGS_log_file);
  options.max_steps = absl::GetFlag(FLAGS_max_steps);
  options.step_timeout = absl::GetFlag(FLAGS_step_timeout);
  options.metrics = metrics;
  options.stopped = [&watcher] { return watcher.signalled(); };
  options.simulate = absl::GetFlag(FLAGS_mode) == "simulate";
  options.simulate_task_time = absl::GetFlag(FLAGS_simulate_task_time);
  options.on_step_given_up = [rank = agent.rank()](const v1::RankStep& step,
                                                   const absl::Status& error) {
    std::fprintf(stderr,
                 "%s dcp-agent rank %d: step %lld of epoch %lld %s%s\n",
                 Now().c_str(), rank, static_cast<long long>(step.step()),
                 static_cast<long long>(step.epoch()),
                 error.ok() ? "skipped (its epoch was given up)"
                            : "given up, waiting for a later epoch: ",
                 std::string(error.message()).c_str());
  };
  AgentStepSource source(&agent);
  ASSIGN_OR_RETURN(const ExecuteSummary done, RunExecuteLoop(source, options));
  std::fprintf(stderr,
               "%s dcp-agent rank %d: done after %lld steps (last %lld); "
               "loss %.4f -> %.4f; %lld reconnects\n",
               Now().c_str(), agent.rank(),
               static_cast<long long>(done.executed),
               static_cast<long long>(done.last_step), done.first_loss,
               done.last_loss,
               static_cast<long long>(agent.Stats().reconnects));
  return absl::OkStatus();
}

absl::Status Serve(Agent& agent, const SignalWatcher& watcher) {
  std::string socket = absl::GetFlag(FLAGS_socket);
  if (socket.empty()) {
    socket = absl::StrCat("/tmp/dcp-agent-", agent.rank(), ".sock");
  }
  AgentServerOptions options;
  options.socket_path = socket;
  options.agent = &agent;
  ASSIGN_OR_RETURN(std::unique_ptr<AgentServer> server,
                   AgentServer::Start(options));
  std::fprintf(stderr, "%s dcp-agent rank %d: serving on %s\n", Now().c_str(),
               agent.rank(), server->address().c_str());
  absl::Status drained = agent.WaitForDrainDelivered(absl::InfiniteDuration());
  // The drained answer is already on its way; the grace lets it out.
  agent.Shutdown();
  server->Shutdown();
  if (!drained.ok() && watcher.signalled()) {
    return absl::CancelledError("stopped by signal");
  }
  return drained;
}

/// Serves `registry` on --metrics_listen and writes --metrics_port_file.
absl::StatusOr<std::unique_ptr<MetricsHttpServer>> StartMetricsServer(
    MetricsRegistry* registry, int rank) {
  MetricsHttpServerOptions options;
  options.listen_address = absl::GetFlag(FLAGS_metrics_listen);
  options.registry = registry;
  options.tls = MetricsTlsOptionsFromFlags();
  RETURN_IF_ERROR(ApplyMetricsServerLimitFlags(options));
  ASSIGN_OR_RETURN(std::unique_ptr<MetricsHttpServer> server,
                   MetricsHttpServer::Start(options));
  std::fprintf(stderr, "%s dcp-agent rank %d: metrics on %s\n", Now().c_str(),
               rank, server->url().c_str());
  if (!absl::GetFlag(FLAGS_metrics_port_file).empty()) {
    RETURN_IF_ERROR(WriteFileAtomically(absl::GetFlag(FLAGS_metrics_port_file),
                                        absl::StrCat(server->port(), "\n")));
  }
  return server;
}

// The agent's options from the flags, for `mode` (execute or serve).
absl::StatusOr<AgentOptions> OptionsFromFlags(const std::string& mode) {
  if (absl::GetFlag(FLAGS_rank) < 0) {
    return absl::InvalidArgumentError("--rank is required (>= 0)");
  }
  RETURN_IF_ERROR(CheckModelFlags());
  AgentOptions options;
  options.scheduler_address = absl::GetFlag(FLAGS_scheduler);
  options.security = SecurityOptionsFromFlags();
  options.rank = absl::GetFlag(FLAGS_rank);
  options.report_stream = absl::GetFlag(FLAGS_report_stream);
  options.world_size = absl::GetFlag(FLAGS_world_size);
  options.host = absl::GetFlag(FLAGS_host);
  if (options.host.empty()) {
    char name[256] = {};
    if (gethostname(name, sizeof(name) - 1) == 0) options.host = name;
  }
  options.gpu = absl::GetFlag(FLAGS_gpu);
  options.gloo_hostname = absl::GetFlag(FLAGS_gloo_hostname);
  options.rendezvous_timeout = absl::GetFlag(FLAGS_rendezvous_timeout);
  options.world_timeout = absl::GetFlag(FLAGS_world_timeout);
  options.prefetch_depth = absl::GetFlag(FLAGS_prefetch_depth);
  options.connect_timeout = absl::GetFlag(FLAGS_connect_timeout);
  options.max_backoff = absl::GetFlag(FLAGS_max_backoff);
  options.max_outage = absl::GetFlag(FLAGS_max_outage);
  options.max_pending_reports = absl::GetFlag(FLAGS_max_pending_reports);
  options.on_reconnect_failed = [rank = options.rank](
                                    int failures, const absl::Status& last,
                                    absl::Duration outage) {
    std::fprintf(stderr,
                 "%s dcp-agent rank %d: the scheduler is unreachable for %s "
                 "(reconnection %d failed: %s)\n",
                 Now().c_str(), rank, absl::FormatDuration(outage).c_str(),
                 failures, std::string(last.message()).c_str());
  };
  // Execute mode trains on c10d groups of its own: the agent forms none.
  // Every mode follows a change of the world (execute mode re-forms its
  // groups over each epoch's ranks), so none says its world is fixed.
  options.warm_groups = mode == "serve";
  RETURN_IF_ERROR(TaskClock().status());
  // Both modes profile here, before the first step (serve mode before its
  // trainer gets one).
  options.run_profile = RunProfile;
  return options;
}

/// The spool of --report_spool_dir (null without it), saying on stderr what
/// an earlier agent left in it.
absl::StatusOr<std::unique_ptr<ReportSpool>> OpenReportSpool(
    const std::string& mode, int rank) {
  const std::string dir = absl::GetFlag(FLAGS_report_spool_dir);
  if (dir.empty()) return nullptr;
  if (mode != "serve") {
    return absl::InvalidArgumentError(absl::StrCat(
        "--report_spool_dir keeps a sidecar trainer's reports: it needs "
        "--mode=serve, not '",
        mode, "'"));
  }
  ASSIGN_OR_RETURN(std::unique_ptr<ReportSpool> spool,
                   ReportSpool::Open(dir, rank));
  if (!spool->tail_problem().empty()) {
    std::fprintf(stderr, "%s dcp-agent rank %d: %s: cut off %s\n",
                 Now().c_str(), rank, spool->path().c_str(),
                 spool->tail_problem().c_str());
  }
  std::fprintf(stderr,
               "%s dcp-agent rank %d: %zu spooled reports to deliver first "
               "(%s)\n",
               Now().c_str(), rank, spool->recovered().size(),
               spool->path().c_str());
  return spool;
}

absl::Status Run() {
  const std::string mode = absl::GetFlag(FLAGS_mode);
  if (mode != "execute" && mode != "serve" && mode != "simulate") {
    return absl::InvalidArgumentError(absl::StrCat(
        "--mode must be execute, serve or simulate, not '", mode, "'"));
  }
  ASSIGN_OR_RETURN(AgentOptions options, OptionsFromFlags(mode));
  // Declared before the agent, which borrows it.
  ASSIGN_OR_RETURN(std::unique_ptr<ReportSpool> spool,
                   OpenReportSpool(mode, options.rank));
  options.report_spool = spool.get();

  SignalWatcher::BlockSignals();
  // Served from before the registration (which may wait for the scheduler),
  // so Prometheus sees the agent up; the stats follow once it registered.
  MetricsRegistry registry;
  std::unique_ptr<AgentMetrics> metrics;
  std::unique_ptr<MetricsHttpServer> metrics_server;
  if (!absl::GetFlag(FLAGS_metrics_listen).empty()) {
    ASSIGN_OR_RETURN(metrics,
                     AgentMetrics::Create(&registry, CurrentBuildInfo()));
    ASSIGN_OR_RETURN(metrics_server,
                     StartMetricsServer(&registry, options.rank));
    AgentMetrics* m = metrics.get();
    options.on_step_received = [m](absl::Time planned, absl::Time received) {
      m->OnStepReceived(planned, received);
    };
    options.on_group_formed = [m](absl::Duration d) { m->OnGroupFormed(d); };
  }
  ASSIGN_OR_RETURN(std::unique_ptr<Agent> agent, Agent::Start(options));
  if (metrics != nullptr) {
    metrics->SetStatsSource(
        [a = agent.get()] { return a->Stats(); },
        {agent->rank(), agent->registration().session_id(), mode});
  }
  // On every way out, stop serving before `agent` goes: no scrape may read
  // an agent that is gone.
  absl::Cleanup stop_metrics = [&metrics_server] {
    if (metrics_server != nullptr) metrics_server->Shutdown();
  };
  const v1::RegisterResponse& hello = agent->registration();
  std::fprintf(stderr,
               "%s dcp-agent rank %d: registered with %s (%s; session %s, "
               "model %s, world %d), resuming at step %lld, mode %s\n",
               Now().c_str(), agent->rank(), options.scheduler_address.c_str(),
               DescribeChannelSecurity(options.security).c_str(),
               hello.session_id().c_str(), hello.model().c_str(),
               hello.world_size(), static_cast<long long>(hello.next_step()),
               mode.c_str());
  Agent* a = agent.get();
  SignalWatcher watcher([a](int signal, int count) {
    if (count > 1) return;
    std::fprintf(stderr, "%s dcp-agent rank %d: signal %d, stopping\n",
                 Now().c_str(), a->rank(), signal);
    a->Shutdown();
  });
  return mode == "serve" ? Serve(*agent, watcher)
                         : Execute(*agent, watcher, metrics.get());
}

}  // namespace
}  // namespace dcp

int main(int argc, char** argv) {
  absl::SetProgramUsageMessage(absl::StrCat(
      "The dcp per-rank agent.\n"
      "  dcp-agent --scheduler=HOST:PORT --rank=R --world_size=N "
      "[--mode=execute|serve]\n"
      "    [--socket=PATH] [--model_config=FILE] [--token_scale=K] "
      "[--task_clock=wall|cpu]\n"
      "    [--log_file=FILE] [--max_steps=S] [--train_seed=S] "
      "[--learning_rate=LR]\n"
      "    [--gpu=G] [--gloo_hostname=ADDR]\n"
      "    [--metrics_listen=HOST:PORT] [--metrics_port_file=FILE]\n"
      "    [--metrics_tls_cert=PEM --metrics_tls_key=PEM "
      "[--metrics_tls_ca=PEM]]\n"
      "    [--metrics_max_connections=N] [--metrics_connection_timeout=D]\n",
      dcp::kSecurityFlagsUsage));
  absl::ParseCommandLine(argc, argv);
  // As in dcp-scheduler: Debian's Abseil has the mutex deadlock detector
  // on; the tests keep it.
  absl::SetMutexDeadlockDetectionMode(absl::OnDeadlockCycle::kIgnore);
  const absl::Status status = dcp::Run();
  if (!status.ok()) {
    std::fprintf(stderr, "dcp-agent rank %d: %s\n", absl::GetFlag(FLAGS_rank),
                 status.ToString().c_str());
    return 1;
  }
  return 0;
}
