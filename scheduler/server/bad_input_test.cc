// Every row of docs/CONTROL_PLANE.md's "Bad input" table, over a real gRPC
// server: a SchedulerServer on 127.0.0.1:0 with a small job of 4 ranks, a job
// id and a bearer token. Each case (one instance of the parameterised test, a
// fresh server) sets the job up (ranks 0..2 registered, rank 3 not; rank 0's
// report of step 0 and one store key accepted), sends its bad request, and
// checks:
//   - the status code and a substring of its message (the table's columns);
//   - the state after equals the state before (GetStatus: steps planned and
//     completed, reports, each rank's registration and last reported step,
//     the store's keys and bytes);
//   - a good request still sees the accepted state: the store key holds its
//     value and rank 0's correct report of step 1 is taken.
// `ReadmeTableListsEveryCase` checks that the document's table and the case
// list below agree, row for row: name, code and message.

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <fstream>
#include <functional>
#include <iterator>
#include <limits>
#include <memory>
#include <sstream>
#include <string>
#include <utility>
#include <vector>

#include "absl/strings/ascii.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "absl/strings/strip.h"
#include "absl/time/time.h"
#include "common/grpc_credentials.h"
#include "common/model_spec.h"
#include "gmock/gmock.h"
#include "grpcpp/client_context.h"
#include "grpcpp/create_channel.h"
#include "grpcpp/security/credentials.h"
#include "gtest/gtest.h"
#include "proto/scheduler_service.grpc.pb.h"
#include "scheduler/planner/test_data.h"
#include "scheduler/server/scheduler_server.h"

namespace dcp {
namespace {

using ::testing::HasSubstr;

constexpr int kWorld = 4;
constexpr char kJob[] = "job-a";
constexpr char kToken[] = "bad-input-test-token-0123456789abcdef";
constexpr int kMaxMessageBytes = 64 << 10;
constexpr int kMaxValueBytes = 1024;

class Harness;

/// One row of the table: what is sent, and the answer expected.
struct BadInputCase {
  /// The table's "test case" column: the instance's name.
  std::string name;
  grpc::StatusCode code;
  /// A substring of the answer's message (the table's "message" column).
  std::string message;
  /// Sends the bad request and returns its answer.
  std::function<grpc::Status(Harness&)> send;
  /// Changes the job before the "before" state is taken (may be empty).
  std::function<void(Harness&)> prepare;
};

/// Seconds a correct agent reports for a task of `tokens` tokens.
double TaskSeconds(int64_t tokens) {
  return 1e-3 + 1e-7 * static_cast<double>(tokens);
}

/// What a correct agent reports for `view`.
v1::TimingReport Timings(const v1::RankStep& view) {
  v1::TimingReport report;
  report.set_epoch(view.epoch());
  report.set_step(view.step());
  report.set_rank(view.rank());
  report.set_sync_seconds(0.01);
  for (int i = 0; i < view.tasks_size(); ++i) {
    const v1::Task& task = view.tasks(i);
    int64_t tokens = 0;
    for (int64_t length : task.lengths()) tokens += length;
    v1::TaskTiming* t = report.add_tasks();
    t->set_task_index(task.task_index());
    t->set_micro_step(i);
    t->set_group_size(task.ranks_size());
    t->set_tokens(tokens);
    t->mutable_sample_lengths()->Add(task.lengths().begin(),
                                     task.lengths().end());
    t->set_recompute(task.recompute());
    t->set_seconds(TaskSeconds(tokens));
    t->set_peak_memory_bytes(1000 * tokens);
  }
  return report;
}

/// The state a bad request must not change, as text (diffs read well).
std::string Projection(const v1::StatusResponse& s) {
  std::string out =
      absl::StrCat("epoch ", s.epoch(), ", planned ", s.planned_steps(),
                   ", completed ", s.completed_steps(), ", reports ",
                   s.timing_reports(), ", draining ", s.draining(), ", store ",
                   s.store_keys(), " keys ", s.store_bytes(), " bytes");
  for (const v1::RankStatus& r : s.ranks()) {
    absl::StrAppend(&out, "; rank ", r.rank(), " registered ", r.registered(),
                    " last reported ", r.last_reported_step());
  }
  return out;
}

/// A plan stream the harness keeps open (rank 1's stays live all along).
struct OpenPlanStream {
  std::unique_ptr<grpc::ClientContext> context;
  std::unique_ptr<grpc::ClientReader<v1::PlanUpdate>> reader;
};

/// The server, the job set up, and the calls the cases make.
class Harness {
 public:
  void Start() {
    const std::string token_file =
        absl::StrCat(::testing::TempDir(), "/bad_input_token");
    std::ofstream(token_file) << kToken << "\n";
    SchedulerServerOptions o;
    o.listen_address = "127.0.0.1:0";
    o.security.job_id = kJob;
    o.security.auth_token_file = token_file;
    ControlPlaneOptions& cp = o.control_plane;
    cp.lengths = testing_data::SkewedTrace(2000, /*seed=*/7);
    // Sequences of at most 4096 tokens: step 0 has tasks a rank is not in.
    cp.window = 4096;
    cp.model = *BuiltinModel("llama3-8b");
    cp.world_size = kWorld;
    cp.tokens_per_step = 65536;
    cp.seed = 5;
    cp.lookahead_steps = 2;
    cp.refit_every = 1000;
    cp.max_message_bytes = kMaxMessageBytes;
    cp.store_max_value_bytes = kMaxValueBytes;
    o.shutdown_grace = absl::Seconds(1);
    absl::StatusOr<std::unique_ptr<SchedulerServer>> server =
        SchedulerServer::Start(std::move(o));
    ASSERT_TRUE(server.ok()) << server.status();
    server_ = *std::move(server);
    stub_ = v1::Scheduler::NewStub(grpc::CreateChannel(
        server_->address(), grpc::InsecureChannelCredentials()));
  }

  /// Ranks 0..2 registered with their plan streams open (rank 3 not),
  /// rank 0's report of step 0 and the store key `Key()` accepted.
  void SetUpJob() {
    for (int rank = 0; rank < 3; ++rank) {
      v1::RegisterResponse hello;
      ASSERT_TRUE(Register(Registration(rank), &hello).ok());
      session_ = hello.session_id();
    }
    for (int rank = 0; rank < 3; ++rank) {
      ASSERT_NO_FATAL_FAILURE(step0_[rank] = ReadStep(rank, 0));
    }
    ASSERT_NO_FATAL_FAILURE(step1_rank0_ = ReadStep(0, 1));
    v1::ReportAck ack;
    const grpc::Status s = ReportTimings(Timings(step0_[0]), &ack);
    ASSERT_TRUE(s.ok()) << s.error_message();
    v1::StoreSetRequest set;
    set.set_session_id(session_);
    set.set_key(Key());
    set.set_value("accepted");
    ASSERT_TRUE(StoreSet(set).ok());
  }

  void TearDown() {
    for (OpenPlanStream& stream : streams_) stream.context->TryCancel();
    for (OpenPlanStream& stream : streams_) {
      v1::PlanUpdate update;
      while (stream.reader->Read(&update)) {
      }
      stream.reader->Finish().IgnoreError();
    }
    streams_.clear();
    if (server_ != nullptr) server_->Shutdown();
  }

  /// A context with a deadline, the job id and the token, as dcp clients
  /// send them; `job` and `token` replace them (empty: left out).
  std::unique_ptr<grpc::ClientContext> Context(
      std::string job = kJob,
      std::string token = absl::StrCat("Bearer ", kToken)) {
    auto context = std::make_unique<grpc::ClientContext>();
    context->set_deadline(std::chrono::system_clock::now() +
                          std::chrono::seconds(20));
    if (!job.empty()) context->AddMetadata(kJobIdMetadataKey, job);
    if (!token.empty()) {
      context->AddMetadata(kAuthorizationMetadataKey, token);
    }
    return context;
  }

  static v1::RegisterRequest Registration(int rank) {
    v1::RegisterRequest request;
    request.set_rank(rank);
    request.set_host(absl::StrCat("host-", rank));
    request.set_gpu(rank);
    request.set_pid(100 + rank);
    request.set_world_size(kWorld);
    return request;
  }

  grpc::Status Register(const v1::RegisterRequest& request,
                        v1::RegisterResponse* response = nullptr) {
    v1::RegisterResponse ignored;
    return stub_->Register(Context().get(), request,
                           response != nullptr ? response : &ignored);
  }

  grpc::Status ReportTimings(const v1::TimingReport& report,
                             v1::ReportAck* ack = nullptr) {
    v1::ReportAck ignored;
    return stub_->ReportTimings(Context().get(), report,
                                ack != nullptr ? ack : &ignored);
  }

  grpc::Status ReportProfile(const v1::ProfileReport& report) {
    v1::ReportAck ack;
    return stub_->ReportProfile(Context().get(), report, &ack);
  }

  grpc::Status StoreSet(const v1::StoreSetRequest& request) {
    v1::StoreSetResponse response;
    return stub_->StoreSet(Context().get(), request, &response);
  }

  grpc::Status StoreGet(const v1::StoreGetRequest& request,
                        v1::StoreGetResponse* response = nullptr) {
    v1::StoreGetResponse ignored;
    return stub_->StoreGet(Context().get(), request,
                           response != nullptr ? response : &ignored);
  }

  v1::StatusResponse Status() {
    v1::StatusResponse status;
    const grpc::Status s = stub_->GetStatus(Context().get(), {}, &status);
    EXPECT_TRUE(s.ok()) << s.error_message();
    return status;
  }

  /// A StreamPlans call that should end at once: its status.
  grpc::Status RefusedStream(const v1::StreamPlansRequest& request,
                             std::unique_ptr<grpc::ClientContext> context) {
    auto reader = stub_->StreamPlans(context.get(), request);
    v1::PlanUpdate update;
    if (reader->Read(&update)) {
      return grpc::Status(grpc::StatusCode::INTERNAL,
                          "the stream sent a message");
    }
    return reader->Finish();
  }

  /// Opens a StreamNodePlans stream that must send no plan: only its
  /// ranks' ends, each with the status the call ends with (returned).
  grpc::Status RefusedNodeStream(const v1::NodePlansRequest& request) {
    std::unique_ptr<grpc::ClientContext> context = Context();
    auto reader = stub_->StreamNodePlans(context.get(), request);
    v1::NodePlanUpdate update;
    std::vector<int32_t> end_codes;
    while (reader->Read(&update)) {
      for (const v1::RankPlanUpdate& part : update.updates()) {
        if (!part.has_end()) {
          return grpc::Status(grpc::StatusCode::INTERNAL,
                              "the stream sent a plan");
        }
        end_codes.push_back(part.end().code());
      }
    }
    const grpc::Status status = reader->Finish();
    for (int32_t code : end_codes) {
      if (code != static_cast<int32_t>(status.error_code())) {
        return grpc::Status(grpc::StatusCode::INTERNAL,
                            "a rank's end differs from the call's");
      }
    }
    return status;
  }

  /// Sends `batch` on a StreamNodeReports stream and returns the status its
  /// first result carries; the stream must end OK with one result batch.
  grpc::Status NodeReport(const v1::TimingReportBatch& batch) {
    std::unique_ptr<grpc::ClientContext> context = Context();
    auto stream = stub_->StreamNodeReports(context.get());
    if (!stream->Write(batch)) {
      return grpc::Status(grpc::StatusCode::INTERNAL, "write failed");
    }
    stream->WritesDone();
    v1::ReportResultBatch results;
    const bool read = stream->Read(&results);
    const grpc::Status end = stream->Finish();
    if (!end.ok()) return end;
    if (!read || results.results().empty()) {
      return grpc::Status(grpc::StatusCode::INTERNAL, "no result");
    }
    const v1::ReportResult& first = results.results(0);
    return grpc::Status(static_cast<grpc::StatusCode>(first.code()),
                        first.message());
  }

  /// A StreamNodePlans request for `ranks`, each from step 0.
  v1::NodePlansRequest NodeRequest(const std::vector<int>& ranks) const {
    v1::NodePlansRequest request;
    for (int rank : ranks) *request.add_ranks() = StreamRequest(rank);
    return request;
  }

  v1::StreamPlansRequest StreamRequest(int rank, int64_t from_step = 0) const {
    v1::StreamPlansRequest request;
    request.set_rank(rank);
    request.set_session_id(session_);
    request.set_from_step(from_step);
    return request;
  }

  /// Reads step `step` from `rank`'s plan stream, opened (and kept) on the
  /// first call for the rank.
  v1::RankStep ReadStep(int rank, int64_t step) {
    OpenPlanStream* stream = nullptr;
    for (size_t i = 0; i < stream_ranks_.size(); ++i) {
      if (stream_ranks_[i] == rank) stream = &streams_[i];
    }
    if (stream == nullptr) {
      OpenPlanStream& opened = streams_.emplace_back();
      opened.context = Context();
      opened.reader =
          stub_->StreamPlans(opened.context.get(), StreamRequest(rank));
      stream_ranks_.push_back(rank);
      stream = &opened;
    }
    v1::PlanUpdate update;
    while (stream->reader->Read(&update)) {
      if (update.has_step() && update.step().step() == step) {
        return update.step();
      }
    }
    ADD_FAILURE() << "rank " << rank << "'s stream ended before step " << step;
    return {};
  }

  /// The end of rank `rank`'s kept plan stream (after its messages).
  grpc::Status EndOfStream(int rank) {
    for (size_t i = 0; i < stream_ranks_.size(); ++i) {
      if (stream_ranks_[i] != rank) continue;
      v1::PlanUpdate update;
      while (streams_[i].reader->Read(&update)) {
      }
      grpc::Status status = streams_[i].reader->Finish();
      streams_.erase(streams_.begin() + static_cast<long>(i));
      stream_ranks_.erase(stream_ranks_.begin() + static_cast<long>(i));
      return status;
    }
    return grpc::Status(grpc::StatusCode::INTERNAL, "no such stream");
  }

  /// Sends `report` on a StreamReports stream and returns the status its
  /// result carries; the stream itself must end OK.
  grpc::Status StreamReport(const v1::TimingReport& report) {
    std::unique_ptr<grpc::ClientContext> context = Context();
    auto stream = stub_->StreamReports(context.get());
    if (!stream->Write(report)) {
      return grpc::Status(grpc::StatusCode::INTERNAL, "write failed");
    }
    stream->WritesDone();
    v1::ReportResult result;
    const bool read = stream->Read(&result);
    const grpc::Status end = stream->Finish();
    if (!end.ok()) return end;
    if (!read) {
      return grpc::Status(grpc::StatusCode::INTERNAL, "no result");
    }
    return grpc::Status(static_cast<grpc::StatusCode>(result.code()),
                        result.message());
  }

  std::string Key() const { return absl::StrCat(session_, "/e0/accepted"); }
  const std::string& session() const { return session_; }
  /// Step 0 as ranks 0..2 were sent it.
  const v1::RankStep& Step0(int rank) const { return step0_[rank]; }
  /// A correct report of step 0 by rank 1 (not yet reported).
  v1::TimingReport Rank1Report() const { return Timings(step0_[1]); }
  const v1::RankStep& Step1OfRank0() const { return step1_rank0_; }
  v1::Scheduler::Stub* stub() { return stub_.get(); }

 private:
  std::unique_ptr<SchedulerServer> server_;
  std::unique_ptr<v1::Scheduler::Stub> stub_;
  std::string session_;
  v1::RankStep step0_[kWorld];
  v1::RankStep step1_rank0_;
  std::vector<OpenPlanStream> streams_;
  std::vector<int> stream_ranks_;
};

/// Rank 1's correct report of step 0 with `change` applied.
std::function<grpc::Status(Harness&)> Rank1Report(
    std::function<void(v1::TimingReport&)> change) {
  return [change](Harness& h) {
    v1::TimingReport report = h.Rank1Report();
    change(report);
    return h.ReportTimings(report);
  };
}

/// A valid one-entry profile of `rank` with `change` applied to its entry.
std::function<grpc::Status(Harness&)> Profile(
    int rank, std::function<void(v1::ProfileEntry&)> change) {
  return [rank, change](Harness& h) {
    v1::ProfileReport report;
    report.set_rank(rank);
    v1::ProfileEntry* e = report.mutable_profile()->add_entries();
    e->set_length(1024);
    e->set_group_size(1);
    e->set_seconds(0.01);
    change(*e);
    return h.ReportProfile(report);
  };
}

std::function<grpc::Status(Harness&)> Store(
    std::function<void(Harness&, v1::StoreSetRequest&)> change) {
  return [change](Harness& h) {
    v1::StoreSetRequest set;
    set.set_session_id(h.session());
    set.set_key(absl::StrCat(h.session(), "/e0/new"));
    set.set_value("value");
    change(h, set);
    return h.StoreSet(set);
  };
}

constexpr double kNaN = std::numeric_limits<double>::quiet_NaN();
using Code = grpc::StatusCode;

// The table, a function per call (or per part of one), in the order of
// docs/CONTROL_PLANE.md's "Bad input" table; `Cases` joins them.

std::vector<BadInputCase> RegisterCases() {
  return {
      {"RegisterRankOutsideWorld", Code::INVALID_ARGUMENT,
       "rank 9 is outside the world of 4 ranks",
       [](Harness& h) { return h.Register(Harness::Registration(9)); }},
      {"RegisterNegativeRank", Code::INVALID_ARGUMENT,
       "rank -1 is outside the world",
       [](Harness& h) { return h.Register(Harness::Registration(-1)); }},
      {"RegisterOtherWorldSize", Code::INVALID_ARGUMENT,
       "started for a world of 8 ranks but this scheduler plans for 4",
       [](Harness& h) {
         v1::RegisterRequest request = Harness::Registration(3);
         request.set_world_size(8);
         return h.Register(request);
       }},
      {"RegisterTwice", Code::ABORTED, "registered again (pid 777",
       [](Harness& h) {
         // Accepted (a restarted agent); the older plan stream ends.
         v1::RegisterRequest request = Harness::Registration(1);
         request.set_pid(777);
         const grpc::Status s = h.Register(request);
         if (!s.ok()) return s;
         return h.EndOfStream(1);
       }},
  };
}

/// StreamPlans and StreamNodePlans.
std::vector<BadInputCase> StreamPlanCases() {
  return {
      {"StreamPlansRankOutsideWorld", Code::INVALID_ARGUMENT,
       "rank 4 is outside the world",
       [](Harness& h) {
         return h.RefusedStream(h.StreamRequest(4), h.Context());
       }},
      {"StreamPlansUnregistered", Code::FAILED_PRECONDITION,
       "rank 3 has not registered",
       [](Harness& h) {
         return h.RefusedStream(h.StreamRequest(3), h.Context());
       }},
      {"StreamPlansOtherSession", Code::FAILED_PRECONDITION,
       "session 'old' is not this scheduler's",
       [](Harness& h) {
         v1::StreamPlansRequest request = h.StreamRequest(2);
         request.set_session_id("old");
         return h.RefusedStream(request, h.Context());
       }},
      {"StreamPlansEmptySession", Code::FAILED_PRECONDITION,
       "session '' is not this scheduler's",
       [](Harness& h) {
         v1::StreamPlansRequest request = h.StreamRequest(2);
         request.clear_session_id();
         return h.RefusedStream(request, h.Context());
       }},
      {"StreamPlansNegativeFromStep", Code::INVALID_ARGUMENT,
       "from_step must be >= 0, not -5",
       [](Harness& h) {
         return h.RefusedStream(h.StreamRequest(2, -5), h.Context());
       }},
      {"StreamNodePlansNoRanks", Code::INVALID_ARGUMENT,
       "StreamNodePlans names no ranks",
       [](Harness& h) { return h.RefusedNodeStream(h.NodeRequest({})); }},
      {"StreamNodePlansRankTwice", Code::INVALID_ARGUMENT,
       "StreamNodePlans names rank 2 twice",
       [](Harness& h) { return h.RefusedNodeStream(h.NodeRequest({2, 2})); }},
      {"StreamNodePlansRankOutsideWorld", Code::INVALID_ARGUMENT,
       "rank 4 is outside the world",
       [](Harness& h) { return h.RefusedNodeStream(h.NodeRequest({4})); }},
  };
}

/// A report for a rank, epoch or step it may not name.
std::vector<BadInputCase> ReportTargetCases() {
  return {
      {"ReportRankOutsideWorld", Code::INVALID_ARGUMENT,
       "rank 7 is outside the world",
       Rank1Report([](v1::TimingReport& r) { r.set_rank(7); })},
      {"ReportUnregisteredRank", Code::FAILED_PRECONDITION,
       "rank 3 has not registered",
       Rank1Report([](v1::TimingReport& r) { r.set_rank(3); })},
      {"ReportStaleEpoch", Code::FAILED_PRECONDITION,
       "epoch 5 is not the current epoch 0",
       Rank1Report([](v1::TimingReport& r) { r.set_epoch(5); })},
      {"ReportStepNotPlanned", Code::INVALID_ARGUMENT,
       "the step has not been planned",
       Rank1Report([](v1::TimingReport& r) { r.set_step(1000); })},
      {"ReportNegativeStep", Code::INVALID_ARGUMENT,
       "for step -1: the step has not been planned",
       Rank1Report([](v1::TimingReport& r) { r.set_step(-1); })},
      {"ReportNegativeEpoch", Code::INVALID_ARGUMENT,
       "for step 0: epoch -1 is negative",
       Rank1Report([](v1::TimingReport& r) { r.set_epoch(-1); })},
  };
}

/// A report whose tasks are not the plan's, or whose figures cannot be.
std::vector<BadInputCase> ReportTaskCases() {
  return {
      {"ReportTaskNotOfRank", Code::INVALID_ARGUMENT, "not on rank 1",
       [](Harness& h) {
         // Rank 1 reports a task of rank 0's or 2's that it is not in.
         v1::TimingReport report = h.Rank1Report();
         for (int other : {0, 2}) {
           for (const v1::Task& task : h.Step0(other).tasks()) {
             if (std::find(task.ranks().begin(), task.ranks().end(), 1) ==
                 task.ranks().end()) {
               report.mutable_tasks(0)->set_task_index(task.task_index());
               return h.ReportTimings(report);
             }
           }
         }
         return grpc::Status(Code::INTERNAL, "every task of step 0 has rank 1");
       }},
      {"ReportTaskIndexMissing", Code::INVALID_ARGUMENT,
       "task_index 100000 does not exist", Rank1Report([](v1::TimingReport& r) {
         r.mutable_tasks(0)->set_task_index(100000);
       })},
      {"ReportTaskTwice", Code::INVALID_ARGUMENT, "is reported twice",
       Rank1Report([](v1::TimingReport& r) { *r.add_tasks() = r.tasks(0); })},
      {"ReportTasksMissing", Code::INVALID_ARGUMENT,
       "tasks in the step but reported 0",
       Rank1Report([](v1::TimingReport& r) { r.clear_tasks(); })},
      {"ReportNegativeSeconds", Code::INVALID_ARGUMENT,
       "seconds -1 is not finite", Rank1Report([](v1::TimingReport& r) {
         r.mutable_tasks(0)->set_seconds(-1);
       })},
      {"ReportNaNSeconds", Code::INVALID_ARGUMENT, "seconds nan is not finite",
       Rank1Report(
           [](v1::TimingReport& r) { r.mutable_tasks(0)->set_seconds(kNaN); })},
      {"ReportNaNSync", Code::INVALID_ARGUMENT,
       "sync_seconds nan is not finite",
       Rank1Report([](v1::TimingReport& r) { r.set_sync_seconds(kNaN); })},
      {"ReportOtherGroupSize", Code::INVALID_ARGUMENT,
       "ran with group size 99 but the plan has",
       Rank1Report([](v1::TimingReport& r) {
         r.mutable_tasks(0)->set_group_size(99);
       })},
      {"ReportOtherTokens", Code::INVALID_ARGUMENT,
       "ran 3 tokens but the plan has", Rank1Report([](v1::TimingReport& r) {
         r.mutable_tasks(0)->set_tokens(3);
       })},
      {"ReportOtherSampleLengths", Code::INVALID_ARGUMENT,
       "differ from the plan's", Rank1Report([](v1::TimingReport& r) {
         r.mutable_tasks(0)->add_sample_lengths(1);
       })},
      {"ReportRecomputeOutOfRange", Code::INVALID_ARGUMENT,
       "recompute 2 is not in [0, 1]", Rank1Report([](v1::TimingReport& r) {
         r.mutable_tasks(0)->set_recompute(2);
       })},
      {"ReportNegativeMemory", Code::INVALID_ARGUMENT,
       "peak_memory_bytes -4 is negative", Rank1Report([](v1::TimingReport& r) {
         r.mutable_tasks(0)->set_peak_memory_bytes(-4);
       })},
  };
}

/// A report sent again, on the report streams, or too large.
std::vector<BadInputCase> ReportRepeatCases() {
  return {
      {"ReportTwice", Code::ALREADY_EXISTS, "rank 0 already reported the step",
       [](Harness& h) { return h.ReportTimings(Timings(h.Step0(0))); }},
      {"ReportCompletedStep", Code::ALREADY_EXISTS,
       "every rank has already reported the step",
       [](Harness& h) { return h.ReportTimings(Timings(h.Step0(0))); },
       [](Harness& h) {
         // Step 0 completes: ranks 1..3 report it too.
         ASSERT_TRUE(h.Register(Harness::Registration(3)).ok());
         const v1::RankStep step3 = h.ReadStep(3, 0);
         for (const v1::RankStep* view : {&h.Step0(1), &h.Step0(2), &step3}) {
           const grpc::Status s = h.ReportTimings(Timings(*view));
           ASSERT_TRUE(s.ok()) << s.error_message();
         }
         // Planned on the planner thread: the state before is once rank
         // 0's stream has the step it made room for.
         h.ReadStep(0, 2);
       }},
      {"StreamReportsBadReport", Code::INVALID_ARGUMENT,
       "seconds nan is not finite",
       [](Harness& h) {
         // Answered in its ReportResult; the stream itself ends OK.
         v1::TimingReport report = h.Rank1Report();
         report.mutable_tasks(0)->set_seconds(kNaN);
         return h.StreamReport(report);
       }},
      {"StreamNodeReportsEmptyBatch", Code::INVALID_ARGUMENT,
       "a TimingReportBatch carries 0 reports; it needs 1 to 4096",
       [](Harness& h) { return h.NodeReport(v1::TimingReportBatch()); }},
      {"StreamNodeReportsBadReport", Code::INVALID_ARGUMENT,
       "seconds nan is not finite",
       [](Harness& h) {
         // Answered in its result of the batch; the stream ends OK.
         v1::TimingReportBatch batch;
         v1::TimingReport& report = *batch.add_reports();
         report = h.Rank1Report();
         report.mutable_tasks(0)->set_seconds(kNaN);
         return h.NodeReport(batch);
       }},
      {"ReportTooLarge", Code::RESOURCE_EXHAUSTED, "larger than max",
       Rank1Report([](v1::TimingReport& r) {
         for (int i = 0; i < kMaxMessageBytes; ++i) {
           r.mutable_tasks(0)->add_sample_lengths(1 << 20);
         }
       })},
  };
}

std::vector<BadInputCase> ProfileCases() {
  return {
      {"ProfileNoEntries", Code::INVALID_ARGUMENT,
       "profile of rank 1 has no entries",
       [](Harness& h) {
         v1::ProfileReport report;
         report.set_rank(1);
         return h.ReportProfile(report);
       }},
      {"ProfileNaNSeconds", Code::INVALID_ARGUMENT,
       "profile of rank 1, entry 0: seconds nan",
       Profile(1, [](v1::ProfileEntry& e) { e.set_seconds(kNaN); })},
      {"ProfileGroupOutsideWorld", Code::INVALID_ARGUMENT,
       "entry 0: group_size 5 is not in [1, 4]",
       Profile(1, [](v1::ProfileEntry& e) { e.set_group_size(5); })},
      {"ProfileNegativeMemory", Code::INVALID_ARGUMENT,
       "entry 0: memory_bytes -1 is negative",
       Profile(1, [](v1::ProfileEntry& e) { e.set_memory_bytes(-1); })},
      {"ProfileUnregisteredRank", Code::FAILED_PRECONDITION,
       "profile of rank 3: rank 3 has not registered",
       Profile(3, [](v1::ProfileEntry&) {})},
  };
}

/// The rendezvous store.
std::vector<BadInputCase> StoreCases() {
  return {
      {"StoreSetOtherSession", Code::FAILED_PRECONDITION,
       "session 'old' is not this scheduler's",
       Store(
           [](Harness&, v1::StoreSetRequest& s) { s.set_session_id("old"); })},
      {"StoreSetKeyWithoutPrefix", Code::INVALID_ARGUMENT,
       "store key 'other/key' must start with",
       Store([](Harness&, v1::StoreSetRequest& s) { s.set_key("other/key"); })},
      {"StoreSetEmptyKey", Code::INVALID_ARGUMENT,
       "store key '' must start with",
       Store([](Harness&, v1::StoreSetRequest& s) { s.clear_key(); })},
      {"StoreSetValueOverLimit", Code::INVALID_ARGUMENT,
       "bytes; the limit is 1024", Store([](Harness&, v1::StoreSetRequest& s) {
         s.set_value(std::string(kMaxValueBytes + 1, 'v'));
       })},
      {"StoreSetTooLarge", Code::RESOURCE_EXHAUSTED, "larger than max",
       Store([](Harness&, v1::StoreSetRequest& s) {
         s.set_value(std::string(kMaxMessageBytes + 1, 'v'));
       })},
      {"StoreGetMissingKey", Code::NOT_FOUND, "/e0/missing' is not set (yet)",
       [](Harness& h) {
         v1::StoreGetRequest get;
         get.set_session_id(h.session());
         get.add_keys(h.Key());
         get.add_keys(absl::StrCat(h.session(), "/e0/missing"));
         return h.StoreGet(get);
       }},
      {"StoreGetOtherSession", Code::FAILED_PRECONDITION,
       "session 'old' is not this scheduler's",
       [](Harness& h) {
         v1::StoreGetRequest get;
         get.set_session_id("old");
         get.add_keys(h.Key());
         return h.StoreGet(get);
       }},
  };
}

/// The guard: the job id and the bearer token of any call.
std::vector<BadInputCase> GuardCases() {
  return {
      {"OtherJobId", Code::PERMISSION_DENIED, "the request is for job 'job-b'",
       [](Harness& h) {
         v1::RegisterResponse response;
         return h.stub()->Register(h.Context("job-b").get(),
                                   Harness::Registration(3), &response);
       }},
      {"NoJobId", Code::PERMISSION_DENIED, "the request names no job",
       [](Harness& h) {
         v1::RegisterResponse response;
         return h.stub()->Register(h.Context("").get(),
                                   Harness::Registration(3), &response);
       }},
      {"WrongToken", Code::UNAUTHENTICATED, "bearer token is not this server's",
       [](Harness& h) {
         v1::TimingReport report = h.Rank1Report();
         v1::ReportAck ack;
         return h.stub()->ReportTimings(h.Context(kJob, "Bearer wrong").get(),
                                        report, &ack);
       }},
      {"NoToken", Code::UNAUTHENTICATED, "carries no bearer token",
       [](Harness& h) {
         auto context = h.Context(kJob, "");
         auto reader = h.stub()->StreamPlans(context.get(), h.StreamRequest(2));
         v1::PlanUpdate update;
         while (reader->Read(&update)) {
         }
         return reader->Finish();
       }},
  };
}

/// The table. Keep docs/CONTROL_PLANE.md's "Bad input" table in step (the
/// test below compares them, row for row).
std::vector<BadInputCase> Cases() {
  std::vector<BadInputCase> cases;
  for (auto* group :
       {RegisterCases, StreamPlanCases, ReportTargetCases, ReportTaskCases,
        ReportRepeatCases, ProfileCases, StoreCases, GuardCases}) {
    std::vector<BadInputCase> rows = group();
    cases.insert(cases.end(), std::make_move_iterator(rows.begin()),
                 std::make_move_iterator(rows.end()));
  }
  return cases;
}

class BadInputTest : public ::testing::TestWithParam<BadInputCase> {
 protected:
  void SetUp() override {
    ASSERT_NO_FATAL_FAILURE(harness_.Start());
    ASSERT_NO_FATAL_FAILURE(harness_.SetUpJob());
  }
  void TearDown() override { harness_.TearDown(); }

  Harness harness_;
};

TEST_P(BadInputTest, AnswersPreciselyAndKeepsWhatWasAccepted) {
  const BadInputCase& c = GetParam();
  if (c.prepare) {
    ASSERT_NO_FATAL_FAILURE(c.prepare(harness_));
  }
  const v1::StatusResponse before = harness_.Status();

  const grpc::Status answer = c.send(harness_);
  EXPECT_EQ(answer.error_code(), c.code) << answer.error_message();
  EXPECT_THAT(answer.error_message(), HasSubstr(c.message));

  // Nothing accepted is lost, nothing rejected is taken.
  const v1::StatusResponse after = harness_.Status();
  EXPECT_EQ(Projection(after), Projection(before));
  v1::StoreGetRequest get;
  get.set_session_id(harness_.session());
  get.add_keys(harness_.Key());
  v1::StoreGetResponse got;
  ASSERT_TRUE(harness_.StoreGet(get, &got).ok());
  ASSERT_EQ(got.values_size(), 1);
  EXPECT_EQ(got.values(0), "accepted");
  // A good request after it is taken, on the state before it.
  v1::ReportAck ack;
  const grpc::Status good =
      harness_.ReportTimings(Timings(harness_.Step1OfRank0()), &ack);
  ASSERT_TRUE(good.ok()) << good.error_message();
  const v1::StatusResponse last = harness_.Status();
  EXPECT_EQ(last.timing_reports(), before.timing_reports() + 1);
  EXPECT_EQ(last.ranks(0).last_reported_step(), 1);
  EXPECT_EQ(last.ranks(1).last_reported_step(),
            before.ranks(1).last_reported_step());
}

INSTANTIATE_TEST_SUITE_P(
    Table, BadInputTest, ::testing::ValuesIn(Cases()),
    [](const ::testing::TestParamInfo<BadInputCase>& info) {
      return info.param.name;
    });

/// The rows of docs/CONTROL_PLANE.md's "### Bad input" table: name, code,
/// message.
struct Row {
  std::string name;
  std::string code;
  std::string message;
};

std::string Unquote(absl::string_view cell) {
  cell = absl::StripAsciiWhitespace(cell);
  absl::ConsumePrefix(&cell, "`");
  absl::ConsumeSuffix(&cell, "`");
  return std::string(cell);
}

std::vector<Row> ReadmeRows() {
  std::ifstream in("docs/CONTROL_PLANE.md");
  EXPECT_TRUE(in.good())
      << "docs/CONTROL_PLANE.md is not in the test's runfiles";
  std::vector<Row> rows;
  std::string line;
  bool in_section = false;
  while (std::getline(in, line)) {
    if (absl::StartsWith(line, "#")) {
      in_section = line == "### Bad input";
      continue;
    }
    if (!in_section || !absl::StartsWith(line, "|")) continue;
    // | request | code | message | test case |
    std::vector<std::string> cells = absl::StrSplit(line, '|');
    if (cells.size() != 6) {
      ADD_FAILURE() << "a row without 4 cells: " << line;
      continue;
    }
    Row row{Unquote(cells[4]), Unquote(cells[2]), Unquote(cells[3])};
    if (row.name == "test case" || absl::StartsWith(row.name, "---")) continue;
    rows.push_back(std::move(row));
  }
  return rows;
}

std::string CodeName(grpc::StatusCode code) {
  return absl::StatusCodeToString(static_cast<absl::StatusCode>(code));
}

TEST(BadInputTableTest, ReadmeTableListsEveryCase) {
  const std::vector<Row> rows = ReadmeRows();
  const std::vector<BadInputCase> cases = Cases();
  ASSERT_EQ(rows.size(), cases.size())
      << "docs/CONTROL_PLANE.md's \"Bad input\" table and the cases differ in "
         "count";
  for (size_t i = 0; i < cases.size(); ++i) {
    SCOPED_TRACE(absl::StrCat("row ", i + 1, ": ", cases[i].name));
    EXPECT_EQ(rows[i].name, cases[i].name);
    EXPECT_EQ(rows[i].code, CodeName(cases[i].code));
    EXPECT_EQ(rows[i].message, cases[i].message);
  }
}

}  // namespace
}  // namespace dcp
