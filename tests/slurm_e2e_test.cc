// deploy/slurm/dcp.sbatch on a real Slurm: Debian's slurmctld and slurmd
// started by the test on this one host (a slurm.conf of its own in a
// directory under /tmp, AuthType=auth/none, no cgroup plugin, free ports),
// and the script submitted with `sbatch --wait` for a job of two tasks on
// the one node: execute-mode dcp-agent ranks, then dcp-train ranks (the
// in-process client). The test reads what the job left (its output, the
// agents' --log_file per rank, dcp-train's loss log, the scheduler's final
// `dcp-ctl status`) and checks that every rank ran every step.
//
// It skips, saying why and quoting the daemons' logs, only when Slurm
// cannot run on this machine: not installed, or a daemon exits at start-up.

#include <arpa/inet.h>
#include <netinet/in.h>
#include <pwd.h>
#include <signal.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cstdlib>
#include <filesystem>
#include <functional>
#include <optional>
#include <set>
#include <string>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "absl/strings/strip.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "gtest/gtest.h"
#include "nlohmann/json.hpp"
#include "tests/child_process.h"
#include "tests/deploy_checks.h"

namespace dcp {
namespace {

using testing_process::Binary;
using testing_process::Child;
using testing_process::Describe;
using testing_process::FindProgram;
using testing_process::JsonNumber;
using testing_process::KillAll;
using testing_process::Poll;
using testing_process::ReadFile;
using testing_process::RunToEnd;
using testing_process::Spawn;
using testing_process::TailLines;
using testing_process::TmpPath;
using testing_process::WaitAll;
using testing_process::WriteFile;

constexpr int kRanks = 2;
constexpr int kSteps = 4;
// Slurm's daemons come up in a second or two here; sbatch --wait polls the
// controller every few seconds, so a job of a few seconds takes about ten.
constexpr absl::Duration kStartPatience = absl::Seconds(60);
constexpr absl::Duration kJobPatience = absl::Seconds(240);
constexpr absl::Duration kStopPatience = absl::Seconds(20);
constexpr int kLogLines = 25;

/// A port nothing listens on now (slurm.conf needs fixed ports; another
/// process could take it before the daemons bind it, which would fail the
/// start-up loudly, not the checks).
int FreePort() {
  const int fd = socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in addr = {};
  addr.sin_family = AF_INET;
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  socklen_t len = sizeof(addr);
  int port = 0;
  if (bind(fd, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)) == 0 &&
      getsockname(fd, reinterpret_cast<sockaddr*>(&addr), &len) == 0) {
    port = ntohs(addr.sin_port);
  }
  close(fd);
  return port;
}

/// The slurm.conf of a one-node cluster: node "localhost" with `cpus` CPUs,
/// daemons as `user`, everything they write under `dir`.
///
/// AuthType=auth/none and CredType=cred/none: no munge daemon and no key
/// (Debian's Slurm 22.05 ships both plugins). ProctrackType=linuxproc and
/// TaskPlugin=task/none: no cgroups. slurmd still loads a cgroup plugin at
/// start-up; cgroup.conf names cgroup/v1, whose start-up needs nothing
/// mounted, where the default (autodetect) fails without /sys/fs/cgroup (a
/// chroot) and cgroup/v2 wants systemd's D-Bus.
std::string SlurmConf(const std::string& dir, const std::string& user, int cpus,
                      int ctld_port, int slurmd_port) {
  return absl::StrCat(
      "ClusterName=dcptest\n"
      "SlurmctldHost=localhost(127.0.0.1)\n"
      "SlurmctldPort=",
      ctld_port, "\nSlurmdPort=", slurmd_port, "\nSlurmUser=", user,
      "\nSlurmdUser=", user,
      "\n"
      "AuthType=auth/none\n"
      "CredType=cred/none\n"
      "StateSaveLocation=",
      dir, "/state\nSlurmdSpoolDir=", dir, "/spool\nSlurmctldPidFile=", dir,
      "/slurmctld.pid\nSlurmdPidFile=", dir,
      "/slurmd.pid\nSlurmctldLogFile=", dir,
      "/slurmctld.log\nSlurmdLogFile=", dir,
      "/slurmd.log\n"
      // At debug the controller logs the node's registration, which the
      // wait for an idle node wakes on.
      "SlurmctldDebug=debug\n"
      "ProctrackType=proctrack/linuxproc\n"
      "TaskPlugin=task/none\n"
      "JobAcctGatherType=jobacct_gather/none\n"
      "AccountingStorageType=accounting_storage/none\n"
      "JobCompType=jobcomp/none\n"
      "MpiDefault=none\n"
      "SelectType=select/cons_tres\n"
      "SelectTypeParameters=CR_CPU\n"
      "ReturnToService=2\n"
      "NodeName=localhost NodeAddr=127.0.0.1 CPUs=",
      cpus,
      " State=UNKNOWN\n"
      "PartitionName=dcp Nodes=localhost Default=YES MaxTime=INFINITE "
      "State=UP\n");
}

/// The test's Slurm: the daemons, the clients and where they write.
struct Slurm {
  /// Under /tmp and short: slurmd's spool holds Unix sockets (108 bytes).
  std::string dir;
  std::string conf;
  std::string sbatch;
  std::string scancel;
  std::string sinfo;
  std::vector<Child> daemons;
  /// Set when this machine cannot run Slurm: why.
  std::string cannot_run;
  /// Set when Slurm should have started and did not: a failure.
  std::string error;

  std::string Logs() const {
    std::string out;
    for (const char* name : {"slurmctld", "slurmd"}) {
      absl::StrAppend(
          &out, "---- ", name, ".log (last lines)\n",
          TailLines(ReadFile(absl::StrCat(dir, "/", name, ".log")), kLogLines),
          "\n");
    }
    absl::StrAppend(&out, Describe(daemons, 2000));
    return out;
  }
};

/// Starts slurmctld and slurmd and waits until the node is idle; on the
/// way out `slurm.cannot_run` or `slurm.error` say what went wrong.
void StartSlurm(Slurm& slurm) {
  std::vector<std::string> missing;
  auto find = [&missing](const std::string& name) {
    std::optional<std::string> path = FindProgram(name);
    if (!path.has_value()) missing.push_back(name);
    return path.value_or("");
  };
  const std::string slurmctld = find("slurmctld");
  const std::string slurmd = find("slurmd");
  slurm.sbatch = find("sbatch");
  slurm.scancel = find("scancel");
  slurm.sinfo = find("sinfo");
  if (!missing.empty()) {
    slurm.cannot_run = absl::StrCat(
        "Slurm is not installed (", absl::StrJoin(missing, ", "),
        " not found); tools/setup.sh installs it (Debian packages slurmctld, "
        "slurmd, slurm-client)");
    return;
  }
  char dir[] = "/tmp/dcp-slurm-XXXXXX";
  if (mkdtemp(dir) == nullptr) {
    slurm.error = "mkdtemp under /tmp failed";
    return;
  }
  slurm.dir = dir;
  for (const char* sub : {"/state", "/spool"}) {
    mkdir((slurm.dir + sub).c_str(), 0755);
  }
  const passwd* user = getpwuid(geteuid());
  const int ctld_port = FreePort();
  int slurmd_port = FreePort();
  while (slurmd_port == ctld_port) slurmd_port = FreePort();
  const long cpus = sysconf(_SC_NPROCESSORS_ONLN);
  slurm.conf = slurm.dir + "/slurm.conf";
  if (user == nullptr || ctld_port <= 0 || slurmd_port <= 0 ||
      !WriteFile(slurm.conf, SlurmConf(slurm.dir, user->pw_name,
                                       static_cast<int>(cpus > 0 ? cpus : 1),
                                       ctld_port, slurmd_port)) ||
      !WriteFile(slurm.dir + "/cgroup.conf", "CgroupPlugin=cgroup/v1\n")) {
    slurm.error = "cannot write the Slurm configuration under " + slurm.dir;
    return;
  }
  // The clients (sbatch, sinfo, scancel, and scontrol and srun in the job)
  // find the cluster through SLURM_CONF.
  setenv("SLURM_CONF", slurm.conf.c_str(), 1);
  slurm.daemons = {
      Spawn("slurmctld", {slurmctld, "-D", "-f", slurm.conf}),
      Spawn("slurmd", {slurmd, "-D", "-f", slurm.conf, "-N", "localhost"})};

  // Until the node is idle (sinfo, asked again whenever the daemons' logs
  // change: the controller logs the node's registration), or a daemon exits
  // (closing its output), bounded by kStartPatience.
  const absl::Time deadline = absl::Now() + kStartPatience;
  testing_process::FileActivity activity({slurm.dir});
  std::string state;
  while (true) {
    for (Child& daemon : slurm.daemons) {
      if (Poll(daemon)) {
        slurm.cannot_run =
            absl::StrCat("Slurm cannot run on this machine: ", daemon.name,
                         " exited at start-up (exit ", daemon.exit_code, ")\n",
                         slurm.Logs());
        return;
      }
    }
    std::vector<Child> query = {
        Spawn("sinfo", {slurm.sinfo, "-h", "-n", "localhost", "-o", "%T"})};
    if (WaitAll(query, absl::Now() + absl::Seconds(10))) {
      state =
          std::string(absl::StripAsciiWhitespace(ReadFile(query[0].out_path)));
      if (query[0].exit_code == 0 && state == "idle") return;
    } else {
      KillAll(query);
    }
    if (absl::Now() > deadline) {
      slurm.error = absl::StrCat("the Slurm node did not become idle in ",
                                 absl::FormatDuration(kStartPatience),
                                 " (sinfo: '", state, "')\n", slurm.Logs());
      return;
    }
    activity.Await(deadline);
  }
}

void StopSlurm(Slurm& slurm) {
  for (Child& daemon : slurm.daemons) {
    if (!Poll(daemon)) kill(daemon.pid, SIGTERM);
  }
  if (!WaitAll(slurm.daemons, absl::Now() + kStopPatience)) {
    KillAll(slurm.daemons);
  }
  unsetenv("SLURM_CONF");
  if (!slurm.dir.empty()) {
    std::error_code ignored;
    std::filesystem::remove_all(slurm.dir, ignored);
  }
}

/// What a job left behind.
struct Job {
  int exit_code = -1;
  /// Its output (this script's lines, the ranks' with srun's "N: " labels).
  std::string output;
  /// DCP_RUN_DIR: the per-rank logs, the scheduler's log, the loss log.
  std::string run_dir;
  std::string Explain() const {
    return absl::StrCat(
        "job output:\n", output, "\nscheduler.log (last lines):\n",
        TailLines(ReadFile(run_dir + "/scheduler.log"), kLogLines));
  }
};

class SlurmE2eTest : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    slurm_ = new Slurm;
    StartSlurm(*slurm_);
  }
  static void TearDownTestSuite() {
    StopSlurm(*slurm_);
    delete slurm_;
    slurm_ = nullptr;
  }
  void SetUp() override {
    if (!slurm_->cannot_run.empty()) {
      // Also on stderr: the test log keeps it where a summary hides it.
      std::fprintf(stderr, "SKIPPED: %s\n", slurm_->cannot_run.c_str());
      GTEST_SKIP() << slurm_->cannot_run;
    }
    ASSERT_TRUE(slurm_->error.empty()) << slurm_->error;
  }

  /// Submits deploy/slurm/dcp.sbatch with `env` (NAME=VALUE, no commas)
  /// for kRanks tasks on the node and waits for it to end.
  static Job Submit(const std::string& name,
                    const std::vector<std::string>& env) {
    Job job;
    const std::string dir = TmpPath(name);
    mkdir(dir.c_str(), 0755);
    job.run_dir = dir + "/run";
    const std::string out = dir + "/job.out";
    std::vector<std::string> exports = {
        "ALL",
        "DCP_RUN_DIR=" + job.run_dir,
        "DCP_SCHEDULER_BIN=" + Binary("scheduler/server/dcp-scheduler"),
        "DCP_AGENT_BIN=" + Binary("worker_agent/dcp-agent"),
        "DCP_CTL_BIN=" + Binary("scheduler/server/dcp-ctl"),
        "DCP_TRAIN_BIN=" + Binary("examples/dcp-train"),
        "DCP_LENGTHS=" + Binary("data/lengths/wikipedia.txt"),
        "DCP_MODEL_CONFIG=" + Binary("data/models/cpu-tiny.json"),
        absl::StrCat("DCP_STEPS=", kSteps),
        // Servers of tests bind loopback; the job's TLS certificate names
        // the node, "localhost".
        "DCP_LISTEN_HOST=127.0.0.1",
        "DCP_METRICS_LISTEN=",
    };
    exports.insert(exports.end(), env.begin(), env.end());
    std::vector<Child> sbatch = {
        Spawn(name + "-sbatch",
              {slurm_->sbatch, "--wait", "--parsable", "--job-name=" + name,
               absl::StrCat("--ntasks=", kRanks), "--nodes=1",
               // Two tasks even on a one-CPU machine.
               "--overcommit", "--time=5", "--output=" + out, "--chdir=" + dir,
               "--export=" + absl::StrJoin(exports, ","),
               Binary("deploy/slurm/dcp.sbatch")})};
    if (!WaitAll(sbatch, absl::Now() + kJobPatience)) {
      const std::string id(
          absl::StripAsciiWhitespace(ReadFile(sbatch[0].out_path)));
      if (!id.empty()) RunToEnd(name + "-scancel", {slurm_->scancel, id});
      KillAll(sbatch);
      ADD_FAILURE() << "job " << name << " (" << id << ") did not end in "
                    << kJobPatience << "\n"
                    << Describe(sbatch) << slurm_->Logs();
    }
    job.exit_code = sbatch[0].exit_code;
    job.output = ReadFile(out);
    if (job.output.empty()) {
      ADD_FAILURE() << "job " << name << " left no output\n"
                    << Describe(sbatch) << slurm_->Logs();
    }
    return job;
  }

  static Slurm* slurm_;
};

Slurm* SlurmE2eTest::slurm_ = nullptr;

/// The scheduler's `dcp-ctl --json status` the script prints at the end.
nlohmann::json FinalStatus(const Job& job) {
  constexpr char kPrefix[] = "dcp: final status: ";
  for (absl::string_view line : absl::StrSplit(job.output, '\n')) {
    if (absl::ConsumePrefix(&line, kPrefix)) {
      return nlohmann::json::parse(line, nullptr, /*allow_exceptions=*/false);
    }
  }
  ADD_FAILURE() << "no '" << kPrefix << "' line\n" << job.Explain();
  return nlohmann::json();
}

/// Every step the scheduler planned was completed, and every rank reported
/// the last one: the scheduler's own account of the job.
void ExpectSchedulerSawEveryStep(const Job& job) {
  const nlohmann::json status = FinalStatus(job);
  ASSERT_TRUE(status.is_object()) << job.Explain();
  EXPECT_EQ(JsonNumber(status["completed_steps"]), kSteps) << job.Explain();
  ASSERT_TRUE(status["ranks"].is_array()) << status.dump();
  ASSERT_EQ(status["ranks"].size(), static_cast<size_t>(kRanks))
      << status.dump();
  for (const nlohmann::json& rank : status["ranks"]) {
    EXPECT_EQ(JsonNumber(rank["last_reported_step"]), kSteps - 1)
        << rank.dump();
  }
  EXPECT_TRUE(absl::StrContains(job.output, "dcp: ranks exited with 0"))
      << job.Explain();
  EXPECT_TRUE(absl::StrContains(job.output, "dcp: scheduler exited with 0"))
      << job.Explain();
}

/// The steps of a JSON-lines log whose lines pass `keep`.
std::set<int> StepsIn(const std::string& path,
                      const std::function<bool(const nlohmann::json&)>& keep) {
  std::set<int> steps;
  for (absl::string_view line : absl::StrSplit(ReadFile(path), '\n')) {
    if (line.empty()) continue;
    const nlohmann::json j =
        nlohmann::json::parse(line, nullptr, /*allow_exceptions=*/false);
    if (j.is_discarded()) {
      ADD_FAILURE() << path << ": not JSON: " << line;
      continue;
    }
    if (keep(j)) steps.insert(j["step"].get<int>());
  }
  return steps;
}

std::set<int> AllSteps() {
  std::set<int> steps;
  for (int s = 0; s < kSteps; ++s) steps.insert(s);
  return steps;
}

TEST_F(SlurmE2eTest, AgentRanksRunEveryStep) {
  const Job job = Submit(
      "dcp-agents", {"DCP_RANKS=agent",
                     // A CPU-sized model at its own lengths; the two ranks
                     // share the host's cores, so each times its own CPU work.
                     "DCP_RANK_FLAGS=--token_scale=1 --task_clock=cpu"});
  ASSERT_EQ(job.exit_code, 0) << job.Explain();
  EXPECT_TRUE(absl::StrContains(job.output, "dcp: scheduler (pid "))
      << job.Explain();
  for (int r = 0; r < kRanks; ++r) {
    const std::string log = absl::StrCat(job.run_dir, "/rank-", r, ".jsonl");
    // One "step" line per step the rank ran, each naming the rank.
    EXPECT_EQ(StepsIn(log,
                      [r](const nlohmann::json& j) {
                        return j["kind"] == "step" && j["rank"] == r;
                      }),
              AllSteps())
        << log << ":\n"
        << ReadFile(log) << job.Explain();
    // Its last line, under srun's label.
    EXPECT_TRUE(absl::StrContains(
        job.output,
        absl::StrCat("dcp-agent rank ", r, ": done after ", kSteps, " steps")))
        << job.Explain();
  }
  ExpectSchedulerSawEveryStep(job);
}

TEST_F(SlurmE2eTest, TrainRanksRunEveryStep) {
  const Job job =
      Submit("dcp-train", {"DCP_RANKS=train", "DCP_RANK_FLAGS=--cpu_clock"});
  ASSERT_EQ(job.exit_code, 0) << job.Explain();
  for (int r = 0; r < kRanks; ++r) {
    // Each rank's last line, under srun's label: the steps it trained.
    EXPECT_TRUE(absl::StrContains(
        job.output, absl::StrCat(r, ": dcp-train: rank ", r, ": ", kSteps,
                                 " steps, loss ")))
        << "rank " << r << "\n"
        << job.Explain();
  }
  // Rank 0 writes the loss of every step of the job.
  const std::string loss = job.run_dir + "/loss.jsonl";
  EXPECT_EQ(StepsIn(loss, [](const nlohmann::json&) { return true; }),
            AllSteps())
      << ReadFile(loss);
  ExpectSchedulerSawEveryStep(job);
}

TEST_F(SlurmE2eTest, BadInputFailsTheJobByName) {
  const Job job =
      Submit("dcp-bad", {"DCP_MODEL_CONFIG=/nonexistent/model.json"});
  EXPECT_NE(job.exit_code, 0) << job.Explain();
  EXPECT_TRUE(
      absl::StrContains(job.output, "/nonexistent/model.json cannot be read"))
      << job.Explain();
}

}  // namespace
}  // namespace dcp
