#include "tests/test_pki.h"

#include <sys/stat.h>
#include <unistd.h>

#include <cstdlib>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "gtest/gtest.h"
#include "tests/child_process.h"

namespace dcp {
namespace testing_process {
namespace {

/// openssl's config for `req`: no prompts, and the extensions of a CA.
constexpr char kConfig[] = R"(
[req]
distinguished_name = dn
prompt = no
[dn]
CN = dcp test
[ca]
basicConstraints = critical,CA:TRUE
keyUsage = critical,keyCertSign,cRLSign
subjectKeyIdentifier = hash
)";

constexpr char kServerExtensions[] =
    "basicConstraints=CA:FALSE\n"
    "keyUsage=critical,digitalSignature\n"
    "extendedKeyUsage=serverAuth\n"
    "subjectAltName=DNS:localhost,DNS:dcp-scheduler,IP:127.0.0.1\n";
constexpr char kClientExtensions[] =
    "basicConstraints=CA:FALSE\n"
    "keyUsage=critical,digitalSignature\n"
    "extendedKeyUsage=clientAuth\n";

/// The openssl binary on PATH; "" when there is none.
std::string FindOpenssl() {
  const char* path = std::getenv("PATH");
  for (const absl::string_view dir :
       absl::StrSplit(path != nullptr ? path : "/usr/bin:/bin", ':')) {
    const std::string candidate = absl::StrCat(dir, "/openssl");
    if (access(candidate.c_str(), X_OK) == 0) return candidate;
  }
  return "";
}

class Openssl {
 public:
  Openssl(std::string binary, std::string dir)
      : binary_(std::move(binary)), dir_(std::move(dir)) {}

  std::string Path(const std::string& name) const {
    return absl::StrCat(dir_, "/", name);
  }

  /// Runs `openssl args...`; false (and a test failure) when it fails.
  bool Run(const std::vector<std::string>& args) {
    std::vector<std::string> argv = {binary_};
    argv.insert(argv.end(), args.begin(), args.end());
    std::vector<Child> one = {
        Spawn(absl::StrCat("openssl-", ++runs_), argv)};
    if (!ExpectAllExit(one, absl::Now() + absl::Seconds(60),
                       "openssl did not finish")) {
      return false;
    }
    EXPECT_EQ(one[0].exit_code, 0)
        << absl::StrJoin(argv, " ") << "\n" << Describe(one);
    return one[0].exit_code == 0;
  }

  /// A P-256 key and a self-signed CA certificate: "<name>.key/.crt".
  bool MakeCa(const std::string& name) {
    return Run({"req", "-x509", "-config", Path("openssl.cnf"), "-extensions",
                "ca", "-newkey", "ec", "-pkeyopt",
                "ec_paramgen_curve:prime256v1", "-nodes", "-keyout",
                Path(name + ".key"), "-out", Path(name + ".crt"), "-days", "2",
                "-subj", "/CN=dcp-test-" + name});
  }

  /// A P-256 key and a certificate `ca` signed with `extensions`.
  bool MakeLeaf(const std::string& name, const std::string& ca,
                const std::string& extensions) {
    return Run({"req", "-config", Path("openssl.cnf"), "-newkey", "ec",
                "-pkeyopt", "ec_paramgen_curve:prime256v1", "-nodes",
                "-keyout", Path(name + ".key"), "-out", Path(name + ".csr"),
                "-subj", "/CN=dcp-" + name}) &&
           Run({"x509", "-req", "-in", Path(name + ".csr"), "-CA",
                Path(ca + ".crt"), "-CAkey", Path(ca + ".key"),
                "-CAcreateserial", "-days", "2", "-out", Path(name + ".crt"),
                "-extfile", Path(extensions)});
  }

 private:
  const std::string binary_;
  const std::string dir_;
  int runs_ = 0;
};

}  // namespace

bool MakeTestPki(const std::string& dir, TestPki* pki) {
  const std::string binary = FindOpenssl();
  if (binary.empty()) {
    ADD_FAILURE() << "no openssl on PATH: run tools/setup.sh";
    return false;
  }
  mkdir(dir.c_str(), 0700);
  Openssl openssl(binary, dir);
  if (!WriteFile(openssl.Path("openssl.cnf"), kConfig) ||
      !WriteFile(openssl.Path("server.ext"), kServerExtensions) ||
      !WriteFile(openssl.Path("client.ext"), kClientExtensions) ||
      !WriteFile(openssl.Path("token"), "dcp-test-token-0123456789abcdef\n") ||
      !WriteFile(openssl.Path("other.token"),
                 "dcp-test-token-fedcba9876543210\n")) {
    ADD_FAILURE() << "cannot write under " << dir;
    return false;
  }
  if (!openssl.MakeCa("ca-a") || !openssl.MakeCa("ca-b") ||
      !openssl.MakeLeaf("server", "ca-a", "server.ext") ||
      !openssl.MakeLeaf("client", "ca-a", "client.ext") ||
      !openssl.MakeLeaf("other-client", "ca-b", "client.ext")) {
    return false;
  }
  pki->ca = openssl.Path("ca-a.crt");
  pki->server_cert = openssl.Path("server.crt");
  pki->server_key = openssl.Path("server.key");
  pki->client_cert = openssl.Path("client.crt");
  pki->client_key = openssl.Path("client.key");
  pki->other_ca = openssl.Path("ca-b.crt");
  pki->other_client_cert = openssl.Path("other-client.crt");
  pki->other_client_key = openssl.Path("other-client.key");
  pki->token = openssl.Path("token");
  pki->other_token = openssl.Path("other.token");
  return true;
}

}  // namespace testing_process
}  // namespace dcp
