#ifndef DCP_TESTS_TEST_PKI_H_
#define DCP_TESTS_TEST_PKI_H_

// A throwaway PKI for the security tests, made with the openssl CLI
// (tools/setup.sh installs it) when the test runs, valid for two days:
// nothing secret or expiring is checked in (testonly).

#include <string>

namespace dcp {
namespace testing_process {

/// PEM files (P-256 keys) and token files under one directory.
struct TestPki {
  /// CA "a" and what it signed: the scheduler's certificate (names
  /// localhost, dcp-scheduler and 127.0.0.1; serverAuth) and a client's
  /// (clientAuth).
  std::string ca;
  std::string server_cert;
  std::string server_key;
  std::string client_cert;
  std::string client_key;
  /// CA "b", which the scheduler does not trust, and a client certificate
  /// it signed.
  std::string other_ca;
  std::string other_client_cert;
  std::string other_client_key;
  /// Two different bearer tokens.
  std::string token;
  std::string other_token;
};

/// Makes a `TestPki` under `dir` (created if missing). False, with a test
/// failure naming the openssl command and its stderr, when any step fails.
bool MakeTestPki(const std::string& dir, TestPki* pki);

}  // namespace testing_process
}  // namespace dcp

#endif  // DCP_TESTS_TEST_PKI_H_
