#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/str_cat.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "scheduler/lengths/length_reader.h"
#include "scheduler/lengths/length_reader_testing.h"

namespace dcp {
namespace {

using ::dcp::testing_lengths::ExpectError;
using ::dcp::testing_lengths::ReadAll;
using ::dcp::testing_lengths::Source;
using ::dcp::testing_lengths::WriteFile;
using ::testing::ElementsAre;

TEST(VideoTokenCountTest, FollowsTheDocumentedFormula) {
  VideoTokenizerOptions open_sora;
  // ceil(33/4) * ceil(720/16) * ceil(1280/16) = 9 * 45 * 80.
  EXPECT_EQ(*VideoTokenCount(33, 720, 1280, open_sora), 9 * 45 * 80);
  // Partial cells round up: ceil(257/16) = 17.
  EXPECT_EQ(*VideoTokenCount(1, 257, 256, open_sora), 1 * 17 * 16);
  EXPECT_EQ(*VideoTokenCount(16, 256, 256, open_sora), 4 * 16 * 16);

  VideoTokenizerOptions causal;
  causal.causal_first_frame = true;
  // 1 + ceil(15/4) = 5 latent frames; an image is one.
  EXPECT_EQ(*VideoTokenCount(16, 256, 256, causal), 5 * 16 * 16);
  EXPECT_EQ(*VideoTokenCount(17, 256, 256, causal), 5 * 16 * 16);
  EXPECT_EQ(*VideoTokenCount(1, 256, 256, causal), 1 * 16 * 16);

  VideoTokenizerOptions custom;
  custom.temporal_compression = 8;
  custom.spatial_compression = 4;
  custom.patch_size = 1;
  EXPECT_EQ(*VideoTokenCount(64, 64, 32, custom), 8 * 16 * 8);
}

TEST(VideoTokenCountTest, RejectsBadInput) {
  VideoTokenizerOptions options;
  ExpectError(VideoTokenCount(0, 256, 256, options), {"must be positive"});
  options.patch_size = 0;
  ExpectError(VideoTokenCount(1, 256, 256, options), {"patch_size=0"});
}

TEST(VideoCsvTest, TurnsOpenSoraMetadataIntoTokens) {
  const std::string path = WriteFile(
      "opensora.csv",
      "path,text,num_frames,height,width,aspect_ratio,fps\n"
      "clips/a.mp4,\"a cat, jumping \"\"high\"\"\",51,720,1280,0.5625,24\n"
      "images/b.jpg,a dog,1,240,426,0.5634,\n");
  auto tokens = ReadAll(path, LengthFormat::kVideoCsv);
  ASSERT_TRUE(tokens.ok()) << tokens.status();
  // ceil(51/4)=13 * 45 * 80; ceil(240/16)=15 * ceil(426/16)=27.
  EXPECT_THAT(*tokens, ElementsAre(13 * 45 * 80, 15 * 27));
}

TEST(VideoCsvTest, UsesConfiguredColumnsAndOptions) {
  LengthSourceOptions options =
      Source(WriteFile("custom_video.csv", "w,h,frames\n64,32,17\n"),
             LengthFormat::kVideoCsv);
  options.video_columns.num_frames = "frames";
  options.video_columns.height = "h";
  options.video_columns.width = "w";
  options.video.causal_first_frame = true;
  auto tokens = ReadAllLengths(options);
  ASSERT_TRUE(tokens.ok()) << tokens.status();
  EXPECT_THAT(*tokens, ElementsAre(5 * 2 * 4));

  options.video.temporal_compression = 0;
  ExpectError(LengthReader::Open(options),
              {"custom_video.csv", "temporal_compression=0"});
}

TEST(VideoCsvTest, BadRowsNameTheLine) {
  ExpectError(ReadAll(WriteFile("video_zero.csv",
                                "num_frames,height,width\n"
                                "16,256,256\n"
                                "0,256,256\n"),
                      LengthFormat::kVideoCsv),
              {"video_zero.csv:3: column \"num_frames\": value must be "
               "positive, got 0"});
  ExpectError(ReadAll(WriteFile("video_nocol.csv", "num_frames,height\n1,2\n"),
                      LengthFormat::kVideoCsv),
              {"video_nocol.csv:1: column \"width\" not found",
               "\"num_frames\", \"height\""});
  ExpectError(ReadAll(WriteFile("video_huge.csv",
                                "num_frames,height,width\n"
                                "2000000,100000,100000\n"),
                      LengthFormat::kVideoCsv),
              {"video_huge.csv:2: token count", "larger than the int32"});
  LengthSourceOptions with_column =
      Source(WriteFile("video_col.csv", "num_frames,height,width\n1,1,1\n"),
             LengthFormat::kVideoCsv);
  with_column.column = "length";
  ExpectError(LengthReader::Open(with_column), {"no named columns"});
}

}  // namespace
}  // namespace dcp
