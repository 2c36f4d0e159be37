#include "scheduler/control/kv_store.h"

#include <string>
#include <vector>

#include "absl/status/status.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace dcp {
namespace {

using ::testing::HasSubstr;

KvStoreOptions Options() {
  KvStoreOptions o;
  o.session_id = "sess";
  o.max_keys = 3;
  o.max_key_bytes = 32;
  o.max_value_bytes = 16;
  return o;
}

TEST(RendezvousStoreTest, SetsGetsAndCountsEachKeyOnce) {
  KvStore store(Options());
  const std::string key01 = "sess/e0/g0-1/id";
  const std::string key23 = "sess/e0/g2-3/id";
  ASSERT_TRUE(store.Set("sess", key01, "abc").ok());
  ASSERT_TRUE(store.Set("sess", key01, "wxyz").ok());  // replaces
  ASSERT_TRUE(store.Set("sess", key23, "def").ok());
  absl::StatusOr<std::vector<std::string>> got =
      store.Get("sess", {key23, key01});
  ASSERT_TRUE(got.ok()) << got.status();
  EXPECT_EQ(*got, (std::vector<std::string>{"def", "wxyz"}));
  const KvStore::Usage usage = store.usage();
  EXPECT_EQ(usage.keys, 2);
  EXPECT_EQ(usage.bytes,
            static_cast<int64_t>(key01.size() + 4 + key23.size() + 3));

  const absl::Status s = store.Get("sess", {key01, "sess/nope"}).status();
  EXPECT_EQ(s.code(), absl::StatusCode::kNotFound);
  EXPECT_THAT(s.message(), HasSubstr("'sess/nope' is not set"));
}

TEST(RendezvousStoreTest, EnforcesTheSessionAndTheLimits) {
  KvStore store(Options());
  EXPECT_EQ(store.Set("other", "sess/e0/x", "v").code(),
            absl::StatusCode::kFailedPrecondition);
  EXPECT_EQ(store.Get("other", {"sess/e0/x"}).status().code(),
            absl::StatusCode::kFailedPrecondition);
  absl::Status s = store.Set("sess", "other/e0/x", "v");
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(s.message(), HasSubstr("must start with 'sess/'"));
  EXPECT_EQ(store.Set("sess", "sess/", "v").code(),
            absl::StatusCode::kInvalidArgument);
  s = store.Set("sess", "sess/" + std::string(28, 'k'), "v");  // 33 bytes
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(s.message(), HasSubstr("has 33 bytes; the limit is 32"));
  s = store.Set("sess", "sess/e0/v", std::string(17, 'v'));
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(s.message(), HasSubstr("has 17 bytes; the limit is 16"));
  EXPECT_EQ(store.usage().keys, 0);  // nothing rejected was kept

  for (const char* key : {"sess/a", "sess/b", "sess/c"}) {
    ASSERT_TRUE(store.Set("sess", key, "v").ok()) << key;
  }
  s = store.Set("sess", "sess/d", "v");
  EXPECT_EQ(s.code(), absl::StatusCode::kResourceExhausted);
  EXPECT_THAT(s.message(), HasSubstr("holds 3 keys"));
  EXPECT_TRUE(store.Set("sess", "sess/c", "v2").ok());  // replacing is fine

  KvStoreOptions small = Options();
  small.max_total_bytes = 40;
  KvStore tight(small);
  // "sess/a" + 16 bytes = 22; a second such key would make 44 > 40.
  ASSERT_TRUE(tight.Set("sess", "sess/a", std::string(16, 'v')).ok());
  s = tight.Set("sess", "sess/b", std::string(16, 'v'));
  EXPECT_EQ(s.code(), absl::StatusCode::kResourceExhausted);
  EXPECT_THAT(s.message(), HasSubstr("limit of 40"));
  ASSERT_TRUE(tight.Set("sess", "sess/b", std::string(12, 'v')).ok());
  EXPECT_EQ(tight.usage().bytes, 40);
}

TEST(RendezvousStoreTest, PurgesEarlierEpochsOnly) {
  KvStoreOptions o = Options();
  o.max_keys = 10;
  KvStore store(o);
  for (const char* key : {"sess/e0/g0-1/id", "sess/e1/g0-1/id",
                          "sess/e10/g0-1/id", "sess/eX/y", "sess/world"}) {
    ASSERT_TRUE(store.Set("sess", key, "v").ok()) << key;
  }
  // Epoch 0 and 1 go; e10, a malformed epoch and a key outside any epoch
  // stay.
  EXPECT_EQ(store.PurgeBefore(2), 2);
  EXPECT_EQ(store.Get("sess", {"sess/e1/g0-1/id"}).status().code(),
            absl::StatusCode::kNotFound);
  EXPECT_TRUE(
      store.Get("sess", {"sess/e10/g0-1/id", "sess/eX/y", "sess/world"}).ok());
  EXPECT_EQ(store.usage().keys, 3);
  EXPECT_EQ(store.usage().bytes,
            static_cast<int64_t>(std::string("sess/e10/g0-1/id").size() +
                                 std::string("sess/eX/y").size() +
                                 std::string("sess/world").size() + 3));
  EXPECT_EQ(store.PurgeBefore(2), 0);
}

}  // namespace
}  // namespace dcp
