// The security flags of the real binaries, end to end: dcp-scheduler with
// mutual TLS, a bearer token and a job id, two dcp-agent processes in
// execute mode training a few steps through it (registration, plan and
// report streams, the rendezvous store of their Gloo groups, all over the
// one secured port), dcp-ctl with and without the right credentials, and
// plaintext refused off loopback unless --insecure. Certificates come from
// tests/test_pki.h (the openssl CLI).

#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "nlohmann/json.hpp"
#include "tests/child_process.h"
#include "tests/job_inputs.h"
#include "tests/test_pki.h"

namespace dcp {
namespace {

using ::testing::HasSubstr;
using testing_process::AgentArgs;
using testing_process::Binary;
using testing_process::Child;
using testing_process::ChildReaper;
using testing_process::Describe;
using testing_process::ExpectAllExit;
using testing_process::JsonNumber;
using testing_process::LcgTrace;
using testing_process::MakeTestPki;
using testing_process::ReadFile;
using testing_process::RunToEnd;
using testing_process::Spawn;
using testing_process::StartScheduler;
using testing_process::TestPki;
using testing_process::TmpPath;
using testing_process::WaitForPortFile;
using testing_process::WriteJob;

constexpr int kWorld = 2;
constexpr int kSteps = 3;
constexpr char kJob[] = "e2e-job";

std::vector<std::string> JobFlags(const std::string& name) {
  std::vector<std::string> flags = WriteJob(
      name,
      LcgTrace(200, 7, 100,
               [](int d) { return d < 90 ? 64 + 8 * d : 4000 + 40 * d; }),
      "tiny-security",
      {/*world_size=*/kWorld, /*gpus_per_node=*/2, /*window=*/8192,
       /*tokens_per_step=*/16384, /*max_steps=*/kSteps});
  flags.push_back("--metrics_listen=");
  return flags;
}

/// Runs `argv` to its end; its exit code (-1 when it had to be killed) and
/// its stderr in `err`.
int Exit(const std::string& name, const std::vector<std::string>& argv,
         std::string* err) {
  std::vector<Child> one = {Spawn(name, argv)};
  if (!ExpectAllExit(one, absl::Now() + absl::Seconds(60),
                     name + " did not finish")) {
    return -1;
  }
  *err = ReadFile(one[0].err_path);
  return one[0].exit_code;
}

std::vector<std::string> With(std::vector<std::string> argv,
                              const std::vector<std::string>& more) {
  argv.insert(argv.end(), more.begin(), more.end());
  return argv;
}

TEST(SecurityE2eTest, PlaintextOffLoopbackNeedsInsecure) {
  std::vector<Child> scheduler;
  ChildReaper reaper({&scheduler});
  const std::vector<std::string> start =
      With({Binary("scheduler/server/dcp-scheduler")}, JobFlags("plain"));
  std::string err;
  EXPECT_EQ(Exit("scheduler-refused", With(start, {"--listen=0.0.0.0:0"}),
                 &err),
            1);
  EXPECT_THAT(err, HasSubstr("refusing to serve plaintext on '0.0.0.0:0'"));
  EXPECT_THAT(err, HasSubstr("--insecure"));
  // Clients refuse before they connect (192.0.2.1 is unroutable).
  EXPECT_EQ(Exit("ctl-refused",
                 {Binary("scheduler/server/dcp-ctl"),
                  "--scheduler=192.0.2.1:50051", "status"},
                 &err),
            1);
  EXPECT_THAT(err, HasSubstr("refusing to connect in plaintext"));
  EXPECT_EQ(Exit("agent-refused",
                 AgentArgs("192.0.2.1:50051", /*rank=*/0, /*world_size=*/0,
                           /*log_file=*/""),
                 &err),
            1);
  EXPECT_THAT(err, HasSubstr("--insecure"));

  const std::string port_file = TmpPath("plain.port");
  scheduler = {Spawn("scheduler-insecure",
                     With(start, {"--listen=0.0.0.0:0", "--insecure",
                                  "--port_file=" + port_file}))};
  const int port = WaitForPortFile(port_file, scheduler[0],
                                   absl::Now() + absl::Seconds(30));
  ASSERT_GT(port, 0) << Describe(scheduler);
  RunToEnd("ctl-stop-insecure",
           {Binary("scheduler/server/dcp-ctl"),
            absl::StrCat("--scheduler=127.0.0.1:", port), "stop"});
  ASSERT_TRUE(ExpectAllExit(scheduler, absl::Now() + absl::Seconds(30),
                            "the scheduler did not stop"));
  EXPECT_EQ(scheduler[0].exit_code, 0);
  EXPECT_THAT(ReadFile(scheduler[0].err_path),
              HasSubstr("(plaintext (--insecure))"));
}

TEST(SecurityE2eTest, JobRunsOverMutualTlsWithTokenAndJobId) {
  TestPki pki;
  ASSERT_TRUE(MakeTestPki(TmpPath("pki"), &pki));
  std::vector<Child> scheduler;
  std::vector<Child> agents;
  ChildReaper reaper({&scheduler, &agents});
  const int port = StartScheduler(
      "scheduler-mtls",
      With(JobFlags("mtls"),
           {"--tls_cert=" + pki.server_cert, "--tls_key=" + pki.server_key,
            "--tls_ca=" + pki.ca, "--auth_token_file=" + pki.token,
            absl::StrCat("--job_id=", kJob)}),
      scheduler);
  ASSERT_GT(port, 0);
  const std::string scheduler_address = absl::StrCat("127.0.0.1:", port);
  const std::string address = "--scheduler=" + scheduler_address;
  const std::vector<std::string> tls = {"--tls_ca=" + pki.ca,
                                        "--tls_cert=" + pki.client_cert,
                                        "--tls_key=" + pki.client_key};
  const std::vector<std::string> member =
      With(tls, {"--auth_token_file=" + pki.token,
                 absl::StrCat("--job_id=", kJob)});
  const std::string ctl = Binary("scheduler/server/dcp-ctl");

  std::string err;
  EXPECT_EQ(Exit("ctl-plaintext", {ctl, address, "status"}, &err), 1);
  EXPECT_THAT(err, HasSubstr("UNAVAILABLE"));
  EXPECT_EQ(Exit("ctl-no-cert",
                 {ctl, address, "--tls_ca=" + pki.ca,
                  "--auth_token_file=" + pki.token, "status"},
                 &err),
            1);
  EXPECT_THAT(err, HasSubstr("UNAVAILABLE"));
  EXPECT_THAT(err, HasSubstr("this client has no certificate"));
  EXPECT_EQ(Exit("ctl-wrong-token",
                 With({ctl, address, "status", "--job_id=e2e-job",
                       "--auth_token_file=" + pki.other_token},
                      tls),
                 &err),
            1);
  EXPECT_THAT(err, HasSubstr("UNAUTHENTICATED"));
  EXPECT_EQ(Exit("ctl-no-job",
                 With({ctl, address, "status", "--auth_token_file=" + pki.token},
                      tls),
                 &err),
            1);
  EXPECT_THAT(err, HasSubstr("names no job but this server serves job "
                             "'e2e-job'"));
  const std::vector<std::string> execute = {
      "--mode=execute", "--model_config=" + TmpPath("mtls-model.json"),
      "--token_scale=64", "--rendezvous_timeout=60s"};
  EXPECT_EQ(
      Exit("agent-other-job",
           With(AgentArgs(scheduler_address, /*rank=*/0, kWorld,
                          /*log_file=*/""),
                With(execute, With(tls, {"--job_id=other-job",
                                         "--auth_token_file=" + pki.token}))),
           &err),
      1);
  EXPECT_THAT(err, HasSubstr("PERMISSION_DENIED"));
  EXPECT_THAT(err, HasSubstr("'other-job' but this server serves job "
                             "'e2e-job'"));

  for (int r = 0; r < kWorld; ++r) {
    agents.push_back(
        Spawn(absl::StrCat("agent-", r),
              With(AgentArgs(scheduler_address, r, kWorld,
                             TmpPath(absl::StrCat("agent-", r, ".jsonl"))),
                   With(execute, member))));
  }
  ASSERT_TRUE(ExpectAllExit(agents, absl::Now() + absl::Seconds(150),
                            "the agents did not finish"));
  for (const Child& a : agents) {
    EXPECT_EQ(a.exit_code, 0) << Describe(agents);
    EXPECT_THAT(ReadFile(a.err_path),
                HasSubstr("(mutual TLS, bearer token, job 'e2e-job'; session"));
  }
  const nlohmann::json status = nlohmann::json::parse(
      RunToEnd("ctl-status", With({ctl, address, "--json", "status"}, member)),
      nullptr, /*allow_exceptions=*/false);
  ASSERT_FALSE(status.is_discarded());
  EXPECT_EQ(JsonNumber(status["completed_steps"]), kSteps);

  RunToEnd("ctl-stop", With({ctl, address, "stop"}, member));
  ASSERT_TRUE(ExpectAllExit(scheduler, absl::Now() + absl::Seconds(30),
                            "the scheduler did not stop"));
  EXPECT_EQ(scheduler[0].exit_code, 0);
  const std::string log = ReadFile(scheduler[0].err_path);
  EXPECT_THAT(log, HasSubstr("(mutual TLS, bearer token, job 'e2e-job')"));
  EXPECT_THAT(log, HasSubstr("refused a GetStatus request"));
  EXPECT_THAT(log, HasSubstr("refused a Register request"));
}

}  // namespace
}  // namespace dcp
