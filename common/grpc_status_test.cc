#include "common/grpc_status.h"

#include "gtest/gtest.h"

namespace dcp {
namespace {

TEST(GrpcStatusTest, OkStaysOk) {
  EXPECT_TRUE(ToGrpcStatus(absl::OkStatus()).ok());
  EXPECT_TRUE(FromGrpcStatus(grpc::Status::OK).ok());
}

TEST(GrpcStatusTest, EveryCodeRoundTripsWithItsMessage) {
  for (int code = 1; code <= 16; ++code) {
    const absl::Status original(static_cast<absl::StatusCode>(code),
                                "rank 7 is outside the world");
    const grpc::Status wire = ToGrpcStatus(original);
    EXPECT_EQ(static_cast<int>(wire.error_code()), code);
    EXPECT_EQ(wire.error_message(), "rank 7 is outside the world");
    EXPECT_EQ(FromGrpcStatus(wire), original) << "code " << code;
  }
}

TEST(GrpcStatusTest, NamesMatchAcrossLibraries) {
  EXPECT_EQ(ToGrpcStatus(absl::NotFoundError("k")).error_code(),
            grpc::StatusCode::NOT_FOUND);
  EXPECT_EQ(ToGrpcStatus(absl::FailedPreconditionError("e")).error_code(),
            grpc::StatusCode::FAILED_PRECONDITION);
  EXPECT_EQ(FromGrpcStatus(grpc::Status(grpc::StatusCode::UNAVAILABLE, "down")),
            absl::UnavailableError("down"));
}

TEST(GrpcStatusTest, UnknownCodesBecomeUnknown) {
  const absl::Status odd(static_cast<absl::StatusCode>(42), "odd");
  EXPECT_EQ(ToGrpcStatus(odd).error_code(), grpc::StatusCode::UNKNOWN);
  EXPECT_EQ(ToGrpcStatus(odd).error_message(), "odd");
  const grpc::Status wire(static_cast<grpc::StatusCode>(99), "odder");
  EXPECT_EQ(FromGrpcStatus(wire).code(), absl::StatusCode::kUnknown);
  EXPECT_EQ(FromGrpcStatus(wire).message(), "odder");
}

}  // namespace
}  // namespace dcp
