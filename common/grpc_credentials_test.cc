#include "common/grpc_credentials.h"

#include <cstdlib>
#include <fstream>
#include <map>
#include <string>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "common/security_options.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace dcp {
namespace {

using ::testing::HasSubstr;

std::string TmpFile(const std::string& name, const std::string& text) {
  const char* dir = std::getenv("TEST_TMPDIR");
  const std::string path = absl::StrCat(dir != nullptr ? dir : "/tmp", "/", name);
  std::ofstream(path) << text;
  return path;
}

TEST(IsLoopbackAddressTest, LoopbackAndUnixOnly) {
  for (const char* local :
       {"127.0.0.1:50051", "127.3.4.5:0", "localhost:1", "LOCALHOST",
        "[::1]:50051", "::1", "[::ffff:127.0.0.1]:9", "unix:/tmp/a.sock",
        "unix-abstract:dcp", "dns:///localhost:50051", "dns:localhost:2",
        "ipv4:127.0.0.1:1,127.0.0.2:2", "ipv6:[::1]:3"}) {
    EXPECT_TRUE(IsLoopbackAddress(local)) << local;
  }
  for (const char* remote :
       {"0.0.0.0:50051", "[::]:50051", "10.0.0.1:50051", "128.0.0.1:1",
        "scheduler.example:50051", "localhost.example:1", "dns:///10.0.0.1:1",
        "dns://8.8.8.8/localhost", "ipv4:127.0.0.1:1,10.0.0.1:2", "ipv4:",
        "xds:///scheduler", "", "[::1"}) {
    EXPECT_FALSE(IsLoopbackAddress(remote)) << remote;
  }
}

TEST(ConstantTimeEqualsTest, EqualOnlyWhenEveryByteAndTheLengthAgree) {
  EXPECT_TRUE(ConstantTimeEquals("secret-token-123", "secret-token-123"));
  EXPECT_FALSE(ConstantTimeEquals("secret-token-123", "secret-token-124"));
  EXPECT_FALSE(ConstantTimeEquals("secret-token-123", "secret-token-12"));
  EXPECT_FALSE(ConstantTimeEquals("secret-token-123", "secret-token-1234"));
  EXPECT_FALSE(ConstantTimeEquals("secret-token-123", ""));
  EXPECT_FALSE(ConstantTimeEquals("", "x"));
  EXPECT_TRUE(ConstantTimeEquals("", ""));
}

TEST(CallAuthenticatorTest, TokenThenJobId) {
  const CallAuthenticator auth("job-a", "0123456789abcdef");
  EXPECT_TRUE(auth.Check("Bearer 0123456789abcdef", "job-a").ok());

  absl::Status s = auth.Check(std::nullopt, "job-a");
  EXPECT_EQ(s.code(), absl::StatusCode::kUnauthenticated);
  EXPECT_THAT(s.message(), HasSubstr("no bearer token"));
  for (const char* wrong : {"Bearer 0123456789abcdeX", "0123456789abcdef",
                            "Bearer ", "bearer 0123456789abcdef"}) {
    s = auth.Check(wrong, "job-a");
    EXPECT_EQ(s.code(), absl::StatusCode::kUnauthenticated) << wrong;
    EXPECT_THAT(s.message(), HasSubstr("not this server's")) << wrong;
  }
  // A wrong token says nothing about the job.
  s = auth.Check("Bearer wrong-token-wrong-token", "job-b");
  EXPECT_EQ(s.code(), absl::StatusCode::kUnauthenticated);
  EXPECT_THAT(s.message(), ::testing::Not(HasSubstr("job-a")));

  s = auth.Check("Bearer 0123456789abcdef", "job-b");
  EXPECT_EQ(s.code(), absl::StatusCode::kPermissionDenied);
  EXPECT_THAT(s.message(), HasSubstr("for job 'job-b'"));
  EXPECT_THAT(s.message(), HasSubstr("serves job 'job-a'"));
  s = auth.Check("Bearer 0123456789abcdef", std::nullopt);
  EXPECT_EQ(s.code(), absl::StatusCode::kPermissionDenied);
  EXPECT_THAT(s.message(), HasSubstr("names no job"));
  EXPECT_THAT(s.message(), HasSubstr("--job_id=job-a"));
}

TEST(CallAuthenticatorTest, NoJobIdMeansRequestsNameNone) {
  const CallAuthenticator auth;
  EXPECT_TRUE(auth.Check(std::nullopt, std::nullopt).ok());
  EXPECT_TRUE(auth.Check("Bearer anything-at-all-here", std::nullopt).ok());
  const absl::Status s = auth.Check(std::nullopt, "job\n-b");
  EXPECT_EQ(s.code(), absl::StatusCode::kPermissionDenied);
  EXPECT_THAT(s.message(), HasSubstr("'job\\n-b'"));
  EXPECT_THAT(s.message(), HasSubstr("without --job_id"));
}

TEST(CallAuthenticatorTest, ReadsMetadataAndRefusesDuplicates) {
  const CallAuthenticator auth("job-a", "");
  std::multimap<grpc::string_ref, grpc::string_ref> metadata;
  metadata.emplace(kJobIdMetadataKey, "job-a");
  EXPECT_TRUE(auth.Check(metadata).ok());
  metadata.emplace(kJobIdMetadataKey, "job-b");
  EXPECT_EQ(auth.Check(metadata).code(), absl::StatusCode::kInvalidArgument);
  metadata.clear();
  metadata.emplace(kJobIdMetadataKey, "job-b");
  EXPECT_EQ(auth.Check(metadata).code(), absl::StatusCode::kPermissionDenied);
}

TEST(MakeServerSecurityTest, PlaintextOnlyOnLoopbackUnlessInsecure) {
  SecurityOptions o;
  absl::StatusOr<ServerSecurity> s = MakeServerSecurity(o, "127.0.0.1:0");
  ASSERT_TRUE(s.ok()) << s.status();
  EXPECT_EQ(s->description, "plaintext (loopback)");
  EXPECT_FALSE(s->authenticator.requires_token());

  s = MakeServerSecurity(o, "0.0.0.0:50051");
  EXPECT_EQ(s.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(s.status().message(), HasSubstr("--insecure"));
  EXPECT_THAT(s.status().message(), HasSubstr("0.0.0.0:50051"));

  o.insecure = true;
  o.job_id = "job-a";
  s = MakeServerSecurity(o, "0.0.0.0:50051");
  ASSERT_TRUE(s.ok()) << s.status();
  EXPECT_EQ(s->description, "plaintext (--insecure), job 'job-a'");
  EXPECT_EQ(s->authenticator.job_id(), "job-a");
}

TEST(MakeServerSecurityTest, RefusesIncompleteOrContradictoryOptions) {
  const std::string cert = TmpFile("cert.pem",
                                   "-----BEGIN CERTIFICATE-----\nAA==\n"
                                   "-----END CERTIFICATE-----\n");
  struct Case {
    SecurityOptions options;
    const char* message;
  };
  std::vector<Case> cases(7);
  cases[0].options.tls_cert = cert;
  cases[0].message = "--tls_cert and --tls_key go together";
  cases[1].options.tls_ca = cert;
  cases[1].message = "needs its own --tls_cert and --tls_key";
  cases[2].options.tls_ca = cert;
  cases[2].options.insecure = true;
  cases[2].message = "contradicts";
  cases[3].options.tls_server_name = "x";
  cases[3].message = "client option";
  cases[4].options.job_id = "job a";
  cases[4].message = "only letters, digits";
  cases[5].options.tls_cert = "/nonexistent/cert.pem";
  cases[5].options.tls_key = cert;
  cases[5].message = "--tls_cert: cannot read '/nonexistent/cert.pem'";
  cases[6].options.tls_cert = cert;
  cases[6].options.tls_key = cert;
  cases[6].message = "--tls_key: '";
  for (const Case& c : cases) {
    const absl::Status s = MakeServerSecurity(c.options, "127.0.0.1:0").status();
    EXPECT_FALSE(s.ok()) << c.message;
    EXPECT_THAT(s.message(), HasSubstr(c.message));
  }
}

TEST(MakeServerSecurityTest, ReadsTheTokenFile) {
  SecurityOptions o;
  o.auth_token_file = TmpFile("short.token", "too-short\n");
  absl::Status s = MakeServerSecurity(o, "127.0.0.1:0").status();
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(s.message(), HasSubstr("at least 16"));
  o.auth_token_file = TmpFile("space.token", "two words are not a token\n");
  s = MakeServerSecurity(o, "127.0.0.1:0").status();
  EXPECT_THAT(s.message(), HasSubstr("without spaces"));
  o.auth_token_file = TmpFile("good.token", "  0123456789abcdef0123\n");
  absl::StatusOr<ServerSecurity> security = MakeServerSecurity(o, "[::1]:0");
  ASSERT_TRUE(security.ok()) << security.status();
  EXPECT_TRUE(security->authenticator.requires_token());
  EXPECT_TRUE(security->authenticator
                  .Check("Bearer 0123456789abcdef0123", std::nullopt)
                  .ok());
  EXPECT_EQ(security->description, "plaintext (loopback), bearer token");
}

TEST(CreateSecureChannelTest, PlaintextOnlyToLoopbackUnlessInsecure) {
  SecurityOptions o;
  EXPECT_TRUE(CreateSecureChannel("127.0.0.1:1", o).ok());
  absl::Status s = CreateSecureChannel("10.0.0.1:50051", o).status();
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(s.message(), HasSubstr("--tls_ca"));
  EXPECT_THAT(s.message(), HasSubstr("--insecure"));
  o.insecure = true;
  EXPECT_TRUE(CreateSecureChannel("10.0.0.1:50051", o).ok());
  EXPECT_EQ(DescribeChannelSecurity(o), "plaintext");
}

TEST(CreateSecureChannelTest, RefusesClientCertificateWithoutCa) {
  SecurityOptions o;
  o.tls_cert = "/a.pem";
  o.tls_key = "/b.pem";
  absl::Status s = CreateSecureChannel("127.0.0.1:1", o).status();
  EXPECT_THAT(s.message(), HasSubstr("needs --tls_ca"));
  o = SecurityOptions();
  o.tls_server_name = "scheduler";
  s = CreateSecureChannel("127.0.0.1:1", o).status();
  EXPECT_THAT(s.message(), HasSubstr("--tls_server_name needs --tls_ca"));
  o = SecurityOptions();
  o.tls_ca = TmpFile("not-a-ca.pem", "hello\n");
  s = CreateSecureChannel("127.0.0.1:1", o).status();
  EXPECT_THAT(s.message(), HasSubstr("holds no PEM certificate"));
}

TEST(WithConnectionHintTest, HintsAtTlsOnlyWhenTheConnectionFailed) {
  SecurityOptions o;
  const absl::Status refused = absl::PermissionDeniedError("job");
  EXPECT_EQ(WithConnectionHint(refused, o), refused);
  absl::Status s = WithConnectionHint(absl::UnavailableError("closed"), o);
  EXPECT_EQ(s.code(), absl::StatusCode::kUnavailable);
  EXPECT_THAT(s.message(), HasSubstr("closed (is the scheduler up?"));
  EXPECT_THAT(s.message(), HasSubstr("speaks plaintext"));
  o.tls_ca = "/ca.pem";
  s = WithConnectionHint(absl::DeadlineExceededError("late"), o);
  EXPECT_EQ(s.code(), absl::StatusCode::kDeadlineExceeded);
  EXPECT_THAT(s.message(), HasSubstr("no certificate"));
}

}  // namespace
}  // namespace dcp
