// Fuzzes dcp-scheduler's durable state on disk (--state_dir/state.log:
// common/record_log.h and file_state_store.h), as a crash, a full
// disk or a stray write may leave it. The input's first byte picks how the
// rest makes the log:
//   0: the rest is the whole file. ReadRecordLog's good records, framed
//      again after the header, are the file's first valid_bytes byte for
//      byte; a tail is reported exactly when valid_bytes < the file's size.
//   1: a job's log (the job, plans, reports, a model, store keys: built
//      once) damaged as the rest says: cut short at an offset (a torn
//      write) or one byte changed (a garbled one). Reading keeps exactly the
//      records wholly before the damage and none after it; the one damaged
//      is never trusted (CRC-32C catches any change of up to 32 bits in a
//      record's length, checksum or payload; a changed length that makes
//      another record is only required to leave the ones before intact).
//   2: the rest is a sequence of records (2-byte length, then a serialized
//      StateRecord or garbage), framed correctly: the state replayed by
//      FileStateStore is exactly what ApplyStateRecord makes of them, or
//      FAILED_PRECONDITION names the first that does not parse or apply.
// In every mode FileStateStore::Open answers a clean status; once open,
// the tail is cut off for good: appending a record and reading again finds
// the good records and the new one and no tail, and a second Open finds
// the same state, nothing dropped.
//
// The seeds (fuzz/corpus/state_log_fuzzer/) are one of each: a job's log
// (records encoded with `protoc --encode=dcp.state.StateRecord`, framed as
// record_log.h says) whole, torn and with a record garbled (mode 0), a cut
// and a changed byte of the built-in log (1), and framed records, one set
// starting with a report before the job (2).

#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <memory>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/string_view.h"
#include "common/record_log.h"
#include "fuzz/fuzz_support.h"
#include "google/protobuf/stubs/logging.h"
#include "proto/plan.pb.h"
#include "scheduler/control/file_state_store.h"
#include "scheduler/control/state_store.h"

namespace dcp {
namespace fuzz {
namespace {

using absl::StatusCode;

constexpr int kMaxRecords = 64;

/// The directory the log lives in, made once per process.
const std::string& Dir() {
  static const std::string* const dir = [] {
    // Memory-backed where there is one: the store fsyncs.
    const char* base = std::getenv("TEST_TMPDIR");
    struct stat shm;
    if (base == nullptr) {
      base = stat("/dev/shm", &shm) == 0 && S_ISDIR(shm.st_mode) ? "/dev/shm"
                                                                 : "/tmp";
    }
    std::string pattern = absl::StrCat(base, "/dcp-state-fuzz-XXXXXX");
    if (mkdtemp(pattern.data()) == nullptr) Fail("cannot make a directory");
    return new std::string(pattern);
  }();
  return *dir;
}

std::string LogPath() { return FileStateStore::LogPath(Dir()); }

void WriteFile(const std::string& path, absl::string_view contents) {
  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  out.write(contents.data(), static_cast<std::streamsize>(contents.size()));
  if (!out.good()) Fail(absl::StrCat("cannot write '", path, "'"));
}

std::string ReadFile(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  return std::string(std::istreambuf_iterator<char>(in), {});
}

/// A log of `payloads` as RecordLogWriter writes it.
std::string LogOf(const std::vector<std::string>& payloads) {
  absl::StatusOr<RecordLogWriter> writer =
      RecordLogWriter::Create(LogPath(), kStateLogHeader, payloads);
  if (!writer.ok()) Fail(writer.status().ToString());
  return ReadFile(LogPath());
}

/// The header a good log starts with.
const std::string& Header() {
  static const std::string* const header =
      new std::string(LogOf({}).substr(0, kRecordLogHeaderBytes));
  return *header;
}

FileStateStoreOptions StoreOptions() {
  FileStateStoreOptions options;
  options.dir = Dir();
  return options;
}

/// The records of a small job: what a scheduler that planned three steps,
/// took some reports, refitted once and set two store keys writes.
std::vector<std::string> JobPayloads() {
  std::vector<state::StateRecord> records;
  state::JobIdentity& job = *records.emplace_back().mutable_job();
  job.set_session_id("fz");
  job.set_samples(100);
  job.set_window(4096);
  job.set_tokens_per_step(8192);
  job.set_world_size(2);
  job.set_gpus_per_node(2);
  job.set_model("fuzz-tiny layers=2");
  for (int step = 0; step < 3; ++step) {
    v1::StepPlan& plan = *records.emplace_back().mutable_planned_step();
    plan.set_step(step);
    v1::Task& task = *plan.add_tasks();
    task.add_ranks(0);
    task.add_ranks(1);
    task.add_lengths(1000 + step);
    for (int rank = 0; rank < 2 && step < 2; ++rank) {
      v1::TimingReport& report = *records.emplace_back().mutable_report();
      report.set_step(step);
      report.set_rank(rank);
      v1::TaskTiming& timing = *report.add_tasks();
      timing.set_seconds(0.5 + rank);
    }
  }
  records.emplace_back().mutable_model()->set_refits(1);
  for (const char* key : {"fz/e0/a", "fz/e1/b"}) {
    state::StoreEntry& entry = *records.emplace_back().mutable_store_set();
    entry.set_key(key);
    entry.set_value(std::string(40, 'v'));
  }
  records.emplace_back().set_store_purge_before(1);
  std::vector<std::string> payloads;
  for (const state::StateRecord& r : records) {
    payloads.push_back(r.SerializeAsString());
  }
  return payloads;
}

/// The state `payloads` make, in the order written: what a store opened on
/// a log of them must hold. Null when one does not parse or apply.
std::unique_ptr<DurableState> Replay(const std::vector<std::string>& payloads) {
  auto state = std::make_unique<DurableState>();
  for (const std::string& payload : payloads) {
    state::StateRecord record;
    if (!record.ParseFromString(payload) ||
        !ApplyStateRecord(record, state.get()).ok()) {
      return nullptr;
    }
  }
  return state;
}

/// `state` as the records that rebuild it, for comparing two states.
std::vector<std::string> Canonical(const DurableState& state) {
  std::vector<std::string> out;
  for (const state::StateRecord& r : SnapshotRecords(state)) {
    out.push_back(r.SerializeAsString());
  }
  return out;
}

/// Checks what ReadRecordLog makes of `file` (now at LogPath()); returns
/// its records, or nullopt when the file is not a log.
std::optional<RecordLogContents> CheckRead(absl::string_view file) {
  absl::StatusOr<RecordLogContents> read =
      ReadRecordLog(LogPath(), kStateLogHeader);
  CheckClean(read.status(), {StatusCode::kFailedPrecondition}, "ReadRecordLog");
  const bool header = file.substr(0, kRecordLogHeaderBytes) == Header();
  DCP_FUZZ_CHECK(read.ok() == header, "ReadRecordLog answered ",
                 read.status().ToString(), " to a file ",
                 header ? "with" : "without", " a log's header");
  if (!read.ok()) {
    // The store refuses it too.
    absl::StatusOr<std::unique_ptr<FileStateStore>> store =
        FileStateStore::Open(StoreOptions());
    DCP_FUZZ_CHECK(
        absl::IsFailedPrecondition(store.status()),
        "Open of a file that is no log: ", store.status().ToString());
    return std::nullopt;
  }
  const int64_t size = static_cast<int64_t>(file.size());
  DCP_FUZZ_CHECK(read->file_bytes == size, "file_bytes ", read->file_bytes,
                 " of a file of ", size);
  DCP_FUZZ_CHECK(
      read->valid_bytes >= kRecordLogHeaderBytes && read->valid_bytes <= size,
      "valid_bytes ", read->valid_bytes, " of ", size);
  DCP_FUZZ_CHECK(read->tail_problem.empty() == (read->valid_bytes == size),
                 "tail '", read->tail_problem, "' with ", read->valid_bytes,
                 " of ", size, " bytes valid");
  std::string framed(file.substr(0, kRecordLogHeaderBytes));
  for (const std::string& r : read->records) {
    absl::StrAppend(&framed, FrameRecord(r));
  }
  DCP_FUZZ_CHECK(framed == file.substr(0, read->valid_bytes),
                 "the good records are not the file's first ",
                 read->valid_bytes, " bytes");
  return *std::move(read);
}

/// Opens a store on the log (holding `file`, read as `read`): a clean
/// status; FAILED_PRECONDITION exactly when the good records make no state
/// (`expected` null); else that state, and the tail cut off for good.
void CheckStore(const RecordLogContents& read) {
  const std::unique_ptr<DurableState> expected = Replay(read.records);
  absl::StatusOr<std::unique_ptr<FileStateStore>> store =
      FileStateStore::Open(StoreOptions());
  CheckClean(store.status(), {StatusCode::kFailedPrecondition},
             "FileStateStore::Open");
  DCP_FUZZ_CHECK(store.ok() == (expected != nullptr),
                 "Open: ", store.status().ToString(), " though the records ",
                 expected != nullptr ? "make" : "do not make", " a state");
  if (!store.ok()) return;
  DCP_FUZZ_CHECK(Canonical((*store)->recovered()) == Canonical(*expected),
                 "the store recovered another state than its records make");
  DCP_FUZZ_CHECK(
      (*store)->recovery().dropped_bytes == read.file_bytes - read.valid_bytes,
      "dropped ", (*store)->recovery().dropped_bytes, " bytes of a ",
      read.file_bytes - read.valid_bytes, "-byte tail");
  store->reset();
  // The tail is gone: a second open finds the same state and no tail.
  absl::StatusOr<std::unique_ptr<FileStateStore>> again =
      FileStateStore::Open(StoreOptions());
  DCP_FUZZ_CHECK(again.ok(), "a second Open: ", again.status().ToString());
  DCP_FUZZ_CHECK((*again)->recovery().dropped_bytes == 0 &&
                     Canonical((*again)->recovered()) == Canonical(*expected),
                 "a second Open found another state or a tail");
}

/// Appends after the good records (what a restarted scheduler does) and
/// reads again: the good records, the new one, no tail.
void CheckAppend(const RecordLogContents& read) {
  absl::StatusOr<RecordLogWriter> writer =
      RecordLogWriter::OpenForAppend(LogPath(), read.valid_bytes);
  CheckClean(writer.status(), {}, "OpenForAppend");
  if (!writer->Append("appended").ok() || !writer->Sync().ok()) {
    Fail("cannot append after the good records");
  }
  absl::StatusOr<RecordLogContents> after =
      ReadRecordLog(LogPath(), kStateLogHeader);
  DCP_FUZZ_CHECK(after.ok() && after->tail_problem.empty(),
                 "after an append: ", after.status().ToString(), " ",
                 after.ok() ? after->tail_problem : "");
  std::vector<std::string> expected = read.records;
  expected.push_back("appended");
  DCP_FUZZ_CHECK(after->records == expected, "after an append the log holds ",
                 after->records.size(), " records, not ", expected.size());
}

/// Mode 1: the job's log, cut or with one byte changed.
void DamagedJobLog(absl::string_view rest) {
  static const std::vector<std::string>* const payloads =
      new std::vector<std::string>(JobPayloads());
  static const std::string* const whole_log = new std::string(LogOf(*payloads));
  const std::string& whole = *whole_log;
  // Where each record's frame ends.
  std::vector<int64_t> ends;
  int64_t end = kRecordLogHeaderBytes;
  for (const std::string& p : *payloads) {
    end += kRecordFrameBytes + static_cast<int64_t>(p.size());
    ends.push_back(end);
  }
  uint32_t offset = 0;
  for (size_t i = 0; i < 4 && i < rest.size(); ++i) {
    offset |= static_cast<uint32_t>(static_cast<uint8_t>(rest[i])) << (8 * i);
  }
  const bool cut = rest.size() < 5;
  const int64_t at = offset % (whole.size() + (cut ? 1 : 0));
  std::string file = whole;
  if (cut) {
    file.resize(at);
  } else {
    const char change = rest[4] != 0 ? rest[4] : 1;
    file[at] = static_cast<char>(file[at] ^ change);
  }
  WriteFile(LogPath(), file);
  std::optional<RecordLogContents> read = CheckRead(file);
  if (!read.has_value()) {
    DCP_FUZZ_CHECK(at < kRecordLogHeaderBytes, "damage at byte ", at,
                   " made the log unreadable");
    return;
  }
  // The records wholly before the damaged byte (or the cut) come back.
  size_t intact = 0;
  while (intact < ends.size() && ends[intact] <= at) ++intact;
  DCP_FUZZ_CHECK(read->records.size() >= intact, "only ", read->records.size(),
                 " of the ", intact, " records before the damage at byte ", at,
                 " were read");
  for (size_t i = 0; i < intact; ++i) {
    DCP_FUZZ_CHECK(read->records[i] == (*payloads)[i], "record ", i,
                   " before the damage came back changed");
  }
  // The damaged record's start: where its length field begins.
  const int64_t start = intact == 0 ? kRecordLogHeaderBytes : ends[intact - 1];
  const bool in_length = !cut && at >= start && at < start + 4;
  if (cut || !in_length) {
    DCP_FUZZ_CHECK(read->records.size() == intact, read->records.size(),
                   " records read where ", intact,
                   " lie before the damage at byte ", at);
  }
  CheckStore(*read);
  CheckAppend(*read);
}

/// Mode 2: records from the input, framed correctly.
void FramedRecords(absl::string_view rest) {
  std::vector<std::string> payloads;
  while (rest.size() >= 2 && payloads.size() < kMaxRecords) {
    const size_t length =
        static_cast<uint8_t>(rest[0]) |
        (static_cast<size_t>(static_cast<uint8_t>(rest[1])) << 8);
    rest.remove_prefix(2);
    const size_t take = std::min(length, rest.size());
    payloads.emplace_back(rest.substr(0, take));
    rest.remove_prefix(take);
  }
  const std::string file = LogOf(payloads);
  std::optional<RecordLogContents> read = CheckRead(file);
  DCP_FUZZ_CHECK(read.has_value() && read->records == payloads &&
                     read->tail_problem.empty(),
                 "a log written whole did not read back whole");
  CheckStore(*read);
}

/// Mode 0: any file.
void RawFile(absl::string_view file) {
  WriteFile(LogPath(), file);
  std::optional<RecordLogContents> read = CheckRead(file);
  if (!read.has_value()) return;
  CheckStore(*read);
  CheckAppend(*read);
}

}  // namespace
}  // namespace fuzz
}  // namespace dcp

extern "C" int LLVMFuzzerInitialize(int*, char***) {
  // Records that are not state records fail to parse, as they should.
  google::protobuf::SetLogHandler(nullptr);
  return 0;
}

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size == 0) return 0;
  dcp::fuzz::Header();  // Made once, before any input's file is written.
  const absl::string_view rest(reinterpret_cast<const char*>(data) + 1,
                               size - 1);
  switch (data[0] % 3) {
    case 0:
      dcp::fuzz::RawFile(rest);
      break;
    case 1:
      dcp::fuzz::DamagedJobLog(rest);
      break;
    default:
      dcp::fuzz::FramedRecords(rest);
      break;
  }
  return 0;
}
