// The scheduler's port secured: a real in-process SchedulerServer with TLS,
// mutual TLS, a bearer token and a job id, and clients made by
// CreateSecureChannel (what dcp-agent, dcp-ctl and client_lib use), over
// real sockets on 127.0.0.1. Certificates come from a throwaway PKI the test
// makes with the openssl CLI (tests/test_pki.h).

#include <atomic>
#include <chrono>
#include <functional>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "absl/time/time.h"
#include "common/grpc_credentials.h"
#include "common/grpc_status.h"
#include "common/model_spec.h"
#include "common/security_options.h"
#include "gmock/gmock.h"
#include "google/protobuf/descriptor.h"
#include "grpcpp/client_context.h"
#include "grpcpp/create_channel.h"
#include "grpcpp/security/credentials.h"
#include "gtest/gtest.h"
#include "proto/scheduler_service.grpc.pb.h"
#include "scheduler/server/scheduler_server.h"
#include "tests/child_process.h"
#include "tests/test_pki.h"
#include "worker_agent/agent.h"

namespace dcp {
namespace {

using ::testing::HasSubstr;
using testing_process::MakeTestPki;
using testing_process::TestPki;
using testing_process::TmpPath;

constexpr absl::Duration kRpcTimeout = absl::Seconds(10);

ModelSpec TinyModel() {
  ModelSpec model;
  model.name = "tiny";
  model.layers = 2;
  model.hidden = 512;
  model.heads = 8;
  model.kv_heads = 8;
  model.ffn = 1024;
  model.vocab = 1000;
  return model;
}

/// A world of one, so that a registered rank 0 gets plans at once.
SchedulerServerOptions ServerOptions(SecurityOptions security,
                                     std::atomic<int>* refused = nullptr) {
  SchedulerServerOptions options;
  options.listen_address = "127.0.0.1:0";
  options.security = std::move(security);
  options.stop_grace = absl::Seconds(5);
  if (refused != nullptr) {
    options.on_refused = [refused](absl::string_view, const absl::Status&) {
      ++*refused;
    };
  }
  ControlPlaneOptions& cp = options.control_plane;
  for (int i = 0; i < 64; ++i) cp.lengths.push_back(256 + (i * 97) % 2048);
  cp.window = 32768;
  cp.tokens_per_step = 16384;
  cp.model = TinyModel();
  cp.world_size = 1;
  cp.lookahead_steps = 2;
  return options;
}

void SetDeadline(grpc::ClientContext& context) {
  context.set_deadline(std::chrono::system_clock::now() +
                       absl::ToChronoMilliseconds(kRpcTimeout));
}

std::unique_ptr<v1::Scheduler::Stub> StubTo(const std::string& target,
                                            const SecurityOptions& security) {
  absl::StatusOr<std::shared_ptr<grpc::Channel>> channel =
      CreateSecureChannel(target, security);
  EXPECT_TRUE(channel.ok()) << channel.status();
  if (!channel.ok()) return nullptr;
  return v1::Scheduler::NewStub(*channel);
}

/// Rank 0's Register as a client with `security` sends it.
absl::StatusOr<v1::RegisterResponse> Register(
    const std::string& target, const SecurityOptions& security) {
  std::unique_ptr<v1::Scheduler::Stub> stub = StubTo(target, security);
  if (stub == nullptr) return absl::InternalError("no channel");
  grpc::ClientContext context;
  SetDeadline(context);
  v1::RegisterRequest request;
  request.set_rank(0);
  request.set_host("security-test");
  v1::RegisterResponse response;
  const absl::Status s =
      FromGrpcStatus(stub->Register(&context, request, &response));
  if (!s.ok()) return s;
  return response;
}

/// Whether rank 0 is registered, as the control plane itself says (not
/// over the wire: the refused client must have changed nothing).
bool RankZeroRegistered(SchedulerServer& server) {
  const v1::StatusResponse status = server.control_plane().Status();
  return status.ranks_size() > 0 && status.ranks(0).registered();
}

class SecurityTest : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    pki_ = new TestPki;
    pki_made_ = MakeTestPki(TmpPath("pki"), pki_);
  }
  static void TearDownTestSuite() { delete pki_; }

  void SetUp() override {
    ASSERT_TRUE(pki_made_) << "the test PKI could not be made";
  }

  /// The scheduler with the test PKI's certificate; with `mutual`, clients
  /// must present one CA "a" signed.
  static SecurityOptions ServerTls(bool mutual) {
    SecurityOptions o;
    o.tls_cert = pki_->server_cert;
    o.tls_key = pki_->server_key;
    if (mutual) o.tls_ca = pki_->ca;
    return o;
  }
  /// A client trusting CA "a", with its certificate when `certificate`.
  static SecurityOptions ClientTls(bool certificate) {
    SecurityOptions o;
    o.tls_ca = pki_->ca;
    if (certificate) {
      o.tls_cert = pki_->client_cert;
      o.tls_key = pki_->client_key;
    }
    return o;
  }

  std::unique_ptr<SchedulerServer> Start(SchedulerServerOptions options) {
    absl::StatusOr<std::unique_ptr<SchedulerServer>> server =
        SchedulerServer::Start(std::move(options));
    EXPECT_TRUE(server.ok()) << server.status();
    return server.ok() ? *std::move(server) : nullptr;
  }

  static TestPki* pki_;
  static bool pki_made_;
};

TestPki* SecurityTest::pki_ = nullptr;
bool SecurityTest::pki_made_ = false;

TEST_F(SecurityTest, MutualTlsClientWithCertificateRoundTrips) {
  std::unique_ptr<SchedulerServer> server =
      Start(ServerOptions(ServerTls(/*mutual=*/true)));
  ASSERT_NE(server, nullptr);
  EXPECT_EQ(server->security(), "mutual TLS");
  const absl::StatusOr<v1::RegisterResponse> hello =
      Register(server->address(), ClientTls(/*certificate=*/true));
  ASSERT_TRUE(hello.ok()) << hello.status();
  EXPECT_EQ(hello->session_id(), server->control_plane().session_id());
  EXPECT_TRUE(RankZeroRegistered(*server));
}

TEST_F(SecurityTest, MutualTlsRefusesClientWithoutCertificate) {
  std::unique_ptr<SchedulerServer> server =
      Start(ServerOptions(ServerTls(/*mutual=*/true)));
  ASSERT_NE(server, nullptr);
  const absl::Status refused =
      Register(server->address(), ClientTls(/*certificate=*/false)).status();
  EXPECT_EQ(refused.code(), absl::StatusCode::kUnavailable) << refused;
  EXPECT_FALSE(RankZeroRegistered(*server));
  // The same server takes a client that has one.
  EXPECT_TRUE(Register(server->address(), ClientTls(true)).ok());
}

TEST_F(SecurityTest, MutualTlsRefusesCertificateOfAnotherCa) {
  std::unique_ptr<SchedulerServer> server =
      Start(ServerOptions(ServerTls(/*mutual=*/true)));
  ASSERT_NE(server, nullptr);
  SecurityOptions stranger = ClientTls(/*certificate=*/false);
  stranger.tls_cert = pki_->other_client_cert;
  stranger.tls_key = pki_->other_client_key;
  const absl::Status refused = Register(server->address(), stranger).status();
  EXPECT_EQ(refused.code(), absl::StatusCode::kUnavailable) << refused;
  EXPECT_FALSE(RankZeroRegistered(*server));
  EXPECT_TRUE(Register(server->address(), ClientTls(true)).ok());
}

TEST_F(SecurityTest, ClientRefusesServerItsCaDidNotSign) {
  std::unique_ptr<SchedulerServer> server =
      Start(ServerOptions(ServerTls(/*mutual=*/false)));
  ASSERT_NE(server, nullptr);
  EXPECT_EQ(server->security(), "TLS");
  SecurityOptions wrong_ca;
  wrong_ca.tls_ca = pki_->other_ca;
  EXPECT_EQ(Register(server->address(), wrong_ca).status().code(),
            absl::StatusCode::kUnavailable);
  // A plaintext client gets no answer from a TLS port either.
  EXPECT_EQ(Register(server->address(), SecurityOptions()).status().code(),
            absl::StatusCode::kUnavailable);
  EXPECT_FALSE(RankZeroRegistered(*server));
  EXPECT_TRUE(Register(server->address(), ClientTls(false)).ok());
}

TEST_F(SecurityTest, ServerNameOverrideChecksTheCertificateName) {
  std::unique_ptr<SchedulerServer> server =
      Start(ServerOptions(ServerTls(/*mutual=*/false)));
  ASSERT_NE(server, nullptr);
  SecurityOptions client = ClientTls(false);
  client.tls_server_name = "dcp-scheduler";  // In the certificate.
  EXPECT_TRUE(Register(server->address(), client).ok());
  client.tls_server_name = "somebody-else";
  EXPECT_EQ(Register(server->address(), client).status().code(),
            absl::StatusCode::kUnavailable);
}

TEST_F(SecurityTest, BearerTokenOverTls) {
  SecurityOptions security = ServerTls(/*mutual=*/false);
  security.auth_token_file = pki_->token;
  std::atomic<int> refused{0};
  std::unique_ptr<SchedulerServer> server =
      Start(ServerOptions(security, &refused));
  ASSERT_NE(server, nullptr);
  EXPECT_EQ(server->security(), "TLS, bearer token");

  SecurityOptions client = ClientTls(false);
  absl::Status s = Register(server->address(), client).status();
  EXPECT_EQ(s.code(), absl::StatusCode::kUnauthenticated) << s;
  EXPECT_THAT(s.message(), HasSubstr("no bearer token"));
  client.auth_token_file = pki_->other_token;
  s = Register(server->address(), client).status();
  EXPECT_EQ(s.code(), absl::StatusCode::kUnauthenticated) << s;
  EXPECT_THAT(s.message(), HasSubstr("not this server's"));
  EXPECT_EQ(refused.load(), 2);
  EXPECT_FALSE(RankZeroRegistered(*server));

  client.auth_token_file = pki_->token;
  EXPECT_TRUE(Register(server->address(), client).ok());
  EXPECT_TRUE(RankZeroRegistered(*server));
}

TEST_F(SecurityTest, BearerTokenOverLoopbackPlaintext) {
  SecurityOptions security;
  security.auth_token_file = pki_->token;
  std::unique_ptr<SchedulerServer> server = Start(ServerOptions(security));
  ASSERT_NE(server, nullptr);
  EXPECT_EQ(server->security(), "plaintext (loopback), bearer token");
  EXPECT_EQ(Register(server->address(), SecurityOptions()).status().code(),
            absl::StatusCode::kUnauthenticated);
  SecurityOptions client;
  client.auth_token_file = pki_->other_token;
  EXPECT_EQ(Register(server->address(), client).status().code(),
            absl::StatusCode::kUnauthenticated);
  EXPECT_FALSE(RankZeroRegistered(*server));
  client.auth_token_file = pki_->token;
  EXPECT_TRUE(Register(server->address(), client).ok());
}

/// Calls one method of the Scheduler service with an empty-ish request;
/// the status of its first answer (a stream that sends a message is OK).
using MethodCall = std::function<grpc::Status(v1::Scheduler::Stub&,
                                              const std::string& session)>;

template <typename Request, typename Response>
MethodCall Unary(grpc::Status (v1::Scheduler::Stub::*method)(
    grpc::ClientContext*, const Request&, Response*)) {
  return [method](v1::Scheduler::Stub& stub, const std::string&) {
    grpc::ClientContext context;
    SetDeadline(context);
    Response response;
    return (stub.*method)(&context, Request(), &response);
  };
}

/// Every method of dcp.v1.Scheduler, by name.
std::map<std::string, MethodCall> EveryMethod() {
  using Stub = v1::Scheduler::Stub;
  std::map<std::string, MethodCall> calls;
  calls["Register"] = [](Stub& stub, const std::string&) {
    grpc::ClientContext context;
    SetDeadline(context);
    v1::RegisterResponse response;
    return stub.Register(&context, v1::RegisterRequest(), &response);
  };
  calls["StreamPlans"] = [](Stub& stub, const std::string& session) {
    grpc::ClientContext context;
    SetDeadline(context);
    v1::StreamPlansRequest request;
    request.set_session_id(session);
    auto reader = stub.StreamPlans(&context, request);
    v1::PlanUpdate update;
    if (reader->Read(&update)) {
      context.TryCancel();
      reader->Finish().ok();
      return grpc::Status::OK;
    }
    return reader->Finish();
  };
  calls["StreamReports"] = [](Stub& stub, const std::string&) {
    grpc::ClientContext context;
    SetDeadline(context);
    auto stream = stub.StreamReports(&context);
    stream->WritesDone();
    return stream->Finish();
  };
  calls["StreamNodePlans"] = [](Stub& stub, const std::string& session) {
    grpc::ClientContext context;
    SetDeadline(context);
    v1::NodePlansRequest request;
    request.add_ranks()->set_session_id(session);
    auto reader = stub.StreamNodePlans(&context, request);
    v1::NodePlanUpdate update;
    if (reader->Read(&update)) {
      context.TryCancel();
      reader->Finish().ok();
      return grpc::Status::OK;
    }
    return reader->Finish();
  };
  calls["StreamNodeReports"] = [](Stub& stub, const std::string&) {
    grpc::ClientContext context;
    SetDeadline(context);
    auto stream = stub.StreamNodeReports(&context);
    stream->WritesDone();
    return stream->Finish();
  };
  calls["ReportTimings"] = Unary(&Stub::ReportTimings);
  calls["ReportProfile"] = Unary(&Stub::ReportProfile);
  calls["StoreSet"] = Unary(&Stub::StoreSet);
  calls["StoreGet"] = Unary(&Stub::StoreGet);
  calls["GetStatus"] = Unary(&Stub::GetStatus);
  calls["Drain"] = Unary(&Stub::Drain);
  return calls;
}

TEST_F(SecurityTest, JobIdIsCheckedOnEveryMethod) {
  SecurityOptions security;
  security.job_id = "job-a";
  std::unique_ptr<SchedulerServer> server = Start(ServerOptions(security));
  ASSERT_NE(server, nullptr);
  const std::string session = server->control_plane().session_id();
  const std::map<std::string, MethodCall> calls = EveryMethod();
  // The test knows every method of the service: a new one must check the
  // call first in SchedulerService, and be added here.
  const google::protobuf::ServiceDescriptor* service =
      v1::RegisterRequest::descriptor()->file()->FindServiceByName(
          "Scheduler");
  ASSERT_NE(service, nullptr);
  ASSERT_EQ(static_cast<size_t>(service->method_count()), calls.size());
  for (int m = 0; m < service->method_count(); ++m) {
    EXPECT_EQ(calls.count(service->method(m)->name()), 1)
        << service->method(m)->name();
  }

  SecurityOptions other_job;
  other_job.job_id = "job-b";
  std::unique_ptr<v1::Scheduler::Stub> stranger =
      StubTo(server->address(), other_job);
  std::unique_ptr<v1::Scheduler::Stub> anonymous =
      StubTo(server->address(), SecurityOptions());
  for (const auto& [name, call] : calls) {
    const grpc::Status s = call(*stranger, session);
    EXPECT_EQ(s.error_code(), grpc::StatusCode::PERMISSION_DENIED) << name;
    EXPECT_THAT(s.error_message(), HasSubstr("for job 'job-b'")) << name;
    EXPECT_THAT(s.error_message(), HasSubstr("serves job 'job-a'")) << name;
    const grpc::Status none = call(*anonymous, session);
    EXPECT_EQ(none.error_code(), grpc::StatusCode::PERMISSION_DENIED) << name;
    EXPECT_THAT(none.error_message(), HasSubstr("names no job")) << name;
  }
  EXPECT_FALSE(RankZeroRegistered(*server));
  EXPECT_FALSE(server->control_plane().Status().draining());

  // The job's own clients reach every method (whatever the method makes of
  // an empty request). Rank 0 registers first, so its plan stream flows;
  // Drain goes last.
  SecurityOptions own = security;
  std::unique_ptr<v1::Scheduler::Stub> member =
      StubTo(server->address(), own);
  ASSERT_TRUE(Register(server->address(), own).ok());
  std::vector<std::string> order;
  for (const auto& [name, call] : calls) {
    if (name != "Drain") order.push_back(name);
  }
  order.push_back("Drain");
  for (const std::string& name : order) {
    const grpc::Status s = calls.at(name)(*member, session);
    EXPECT_NE(s.error_code(), grpc::StatusCode::PERMISSION_DENIED) << name;
    EXPECT_NE(s.error_code(), grpc::StatusCode::UNAUTHENTICATED) << name;
    EXPECT_NE(s.error_code(), grpc::StatusCode::UNIMPLEMENTED) << name;
  }
  EXPECT_TRUE(server->control_plane().Status().draining());
}

TEST_F(SecurityTest, PlaintextOffLoopbackNeedsInsecure) {
  SchedulerServerOptions options = ServerOptions(SecurityOptions());
  options.listen_address = "0.0.0.0:0";
  const absl::Status refused = SchedulerServer::Start(options).status();
  EXPECT_EQ(refused.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(refused.message(), HasSubstr("--insecure"));

  options.security.insecure = true;
  std::unique_ptr<SchedulerServer> server = Start(std::move(options));
  ASSERT_NE(server, nullptr);
  EXPECT_EQ(server->security(), "plaintext (--insecure)");
  EXPECT_TRUE(
      Register(absl::StrCat("127.0.0.1:", server->port()), SecurityOptions())
          .ok());

  // Clients alike: no connection is even tried.
  AgentOptions agent;
  agent.scheduler_address = "192.0.2.1:50051";  // TEST-NET-1, unroutable.
  agent.rank = 0;
  const absl::Status client = Agent::Start(agent).status();
  EXPECT_EQ(client.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(client.message(), HasSubstr("--insecure"));
}

TEST_F(SecurityTest, AgentRegistersOverMutualTlsWithTokenAndJobId) {
  SecurityOptions security = ServerTls(/*mutual=*/true);
  security.auth_token_file = pki_->token;
  security.job_id = "job-a";
  std::unique_ptr<SchedulerServer> server = Start(ServerOptions(security));
  ASSERT_NE(server, nullptr);
  EXPECT_EQ(server->security(), "mutual TLS, bearer token, job 'job-a'");

  AgentOptions options;
  options.scheduler_address = server->address();
  options.rank = 0;
  options.connect_timeout = absl::Seconds(10);
  options.security = ClientTls(/*certificate=*/true);
  options.security.auth_token_file = pki_->token;
  options.security.job_id = "job-b";
  const absl::Status wrong_job = Agent::Start(options).status();
  EXPECT_EQ(wrong_job.code(), absl::StatusCode::kPermissionDenied);
  EXPECT_THAT(wrong_job.message(), HasSubstr("registering rank 0"));
  EXPECT_THAT(wrong_job.message(), HasSubstr("serves job 'job-a'"));
  EXPECT_FALSE(RankZeroRegistered(*server));

  options.security.job_id = "job-a";
  absl::StatusOr<std::unique_ptr<Agent>> agent = Agent::Start(options);
  ASSERT_TRUE(agent.ok()) << agent.status();
  // The plan stream and the report path run over the same channel.
  absl::StatusOr<NextStepResult> next =
      (*agent)->NextStep(-1, absl::Seconds(30));
  ASSERT_TRUE(next.ok()) << next.status();
  EXPECT_EQ(next->step.step(), 0);
  v1::TimingReport report;
  report.set_epoch(next->step.epoch());
  report.set_step(0);
  report.set_rank(0);
  for (int m = 0; m < next->step.tasks_size(); ++m) {
    v1::TaskTiming& t = *report.add_tasks();
    t.set_task_index(next->step.tasks(m).task_index());
    t.set_micro_step(m);
    t.set_seconds(0.01);
  }
  EXPECT_TRUE((*agent)->ReportTimings(report).ok());
  EXPECT_EQ(server->control_plane().Status().completed_steps(), 1);
  (*agent)->Shutdown();
}

}  // namespace
}  // namespace dcp
