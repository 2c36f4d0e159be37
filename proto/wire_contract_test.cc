// The wire schema against its contract: agents, trainers and schedulers of
// different builds talk to each other during a rolling upgrade, so a field
// of dcp.v1 must never change its number or type, and a method never its
// request or response. proto/wire_contract.txt lists every field and method
// as released; this test fails on any difference, naming it. Adding a field
// or method is allowed: add its line to the contract (the failure prints it).

#include <cstdlib>
#include <fstream>
#include <set>
#include <sstream>
#include <string>
#include <vector>

#include "google/protobuf/descriptor.h"
#include "gtest/gtest.h"
#include "proto/agent_service.pb.h"
#include "proto/plan.pb.h"
#include "proto/scheduler_service.pb.h"

namespace dcp::v1 {
namespace {

using google::protobuf::Descriptor;
using google::protobuf::FieldDescriptor;
using google::protobuf::FileDescriptor;

std::string FieldType(const FieldDescriptor& field) {
  std::string type = field.type() == FieldDescriptor::TYPE_MESSAGE ||
                             field.type() == FieldDescriptor::TYPE_ENUM
                         ? (field.type() == FieldDescriptor::TYPE_MESSAGE
                                ? field.message_type()->full_name()
                                : field.enum_type()->full_name())
                         : field.type_name();
  return field.is_repeated() ? "repeated " + type : type;
}

void AddMessage(const Descriptor& message, std::set<std::string>* lines) {
  for (int i = 0; i < message.field_count(); ++i) {
    const FieldDescriptor& field = *message.field(i);
    lines->insert(message.full_name() + "." + field.name() + " = " +
                  std::to_string(field.number()) + " " + FieldType(field));
  }
  for (int i = 0; i < message.nested_type_count(); ++i) {
    AddMessage(*message.nested_type(i), lines);
  }
}

// One line per field ("dcp.v1.StepPlan.step = 2 int64"), enum value and
// method ("rpc dcp.v1.Scheduler.Register(dcp.v1.RegisterRequest) returns
// dcp.v1.RegisterResponse") of the schema's files.
std::set<std::string> SchemaLines() {
  std::set<std::string> lines;
  const FileDescriptor* files[] = {
      StepPlan::descriptor()->file(),
      RegisterRequest::descriptor()->file(),
      NextStepRequest::descriptor()->file(),
  };
  for (const FileDescriptor* file : files) {
    for (int i = 0; i < file->message_type_count(); ++i) {
      AddMessage(*file->message_type(i), &lines);
    }
    for (int i = 0; i < file->enum_type_count(); ++i) {
      const auto& e = *file->enum_type(i);
      for (int v = 0; v < e.value_count(); ++v) {
        lines.insert(e.full_name() + "." + e.value(v)->name() + " = " +
                     std::to_string(e.value(v)->number()));
      }
    }
    for (int i = 0; i < file->service_count(); ++i) {
      const auto& service = *file->service(i);
      for (int m = 0; m < service.method_count(); ++m) {
        const auto& method = *service.method(m);
        std::string line = "rpc " + method.full_name() + "(";
        if (method.client_streaming()) line += "stream ";
        line += method.input_type()->full_name() + ") returns ";
        if (method.server_streaming()) line += "stream ";
        lines.insert(line + method.output_type()->full_name());
      }
    }
  }
  return lines;
}

std::set<std::string> ContractLines() {
  const std::string path =
      std::string(std::getenv("TEST_SRCDIR")) + "/dcp/proto/wire_contract.txt";
  std::ifstream in(path);
  EXPECT_TRUE(in.good()) << "cannot read " << path;
  std::set<std::string> lines;
  std::string line;
  while (std::getline(in, line)) {
    if (!line.empty() && line[0] != '#') lines.insert(line);
  }
  return lines;
}

TEST(WireContractTest, NoReleasedFieldOrMethodChanged) {
  const std::set<std::string> schema = SchemaLines();
  const std::set<std::string> contract = ContractLines();
  ASSERT_FALSE(contract.empty());
  for (const std::string& line : contract) {
    EXPECT_TRUE(schema.count(line) == 1)
        << "the schema no longer has '" << line
        << "': a released field, value or method was renumbered, retyped, "
           "renamed or removed. Keep it (mark a field deprecated, or reserve "
           "its number) instead.";
  }
}

TEST(WireContractTest, EveryFieldAndMethodIsInTheContract) {
  const std::set<std::string> contract = ContractLines();
  std::ostringstream missing;
  for (const std::string& line : SchemaLines()) {
    if (contract.count(line) == 0) missing << line << "\n";
  }
  EXPECT_EQ(missing.str(), "")
      << "new in the schema; add these lines to proto/wire_contract.txt:\n"
      << missing.str();
}

}  // namespace
}  // namespace dcp::v1
