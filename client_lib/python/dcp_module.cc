// dcp._dcp: the Python face of client_lib (Client, its steps and tasks) and
// of the synthetic corpus the examples train on. The package around it
// (client_lib/python/dcp/) adds the Python-side loop form and dcp.torch.
//
// Every call that waits (connecting, next_step, report_step) releases the
// GIL, so other Python threads (a data loader) keep running. C++ errors
// come back as dcp.Error, a RuntimeError whose text is the status
// ("DEADLINE_EXCEEDED: ...") and whose `code` is the status code's name.

#include <pybind11/pybind11.h>
#include <pybind11/stl.h>

#include <cstdint>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/str_cat.h"
#include "absl/time/time.h"
#include "client_lib/client.h"
#include "common/security_options.h"
#include "train/corpus.h"

namespace py = pybind11;

namespace dcp::python {
namespace {

// A non-OK status on its way to Python.
class StatusError : public std::exception {
 public:
  explicit StatusError(absl::Status status)
      : status_(std::move(status)), text_(status_.ToString()) {}
  const char* what() const noexcept override { return text_.c_str(); }
  const absl::Status& status() const { return status_; }

 private:
  absl::Status status_;
  std::string text_;
};

void OrThrow(const absl::Status& status) {
  if (!status.ok()) throw StatusError(status);
}

template <typename T>
T OrThrow(absl::StatusOr<T> value) {
  if (!value.ok()) throw StatusError(value.status());
  return *std::move(value);
}

absl::Duration Seconds(double seconds, const char* what) {
  if (!(seconds > 0)) {
    throw StatusError(absl::InvalidArgumentError(
        absl::StrCat(what, " must be a positive number of seconds, got ",
                     seconds)));
  }
  return absl::Seconds(seconds);
}

// Python sees Client's Step and StepTask, but for two things: a task's
// `group` is not exposed (Python forms its own torch.distributed groups,
// dcp.torch), and its loss weights are always present: when the plan has
// none they are derived from the step's tokens, as train/trainer.cc
// derives them.
Step WithLossWeights(Step step) {
  if (step.total_tokens <= 0) return step;
  for (StepTask& task : step.tasks) {
    if (!task.loss_weights.empty()) continue;
    for (int64_t length : task.lengths) {
      task.loss_weights.push_back(static_cast<double>(length) /
                                  static_cast<double>(step.total_tokens));
    }
  }
  return step;
}

class PyClient {
 public:
  PyClient(const std::string& scheduler, int rank, int world_size,
           const std::string& agent_socket, double step_timeout,
           double connect_timeout, double rpc_timeout,
           const SecurityOptions& security) {
    ClientOptions options;
    options.step_timeout = Seconds(step_timeout, "step_timeout");
    options.rpc_timeout = Seconds(rpc_timeout, "rpc_timeout");
    options.communicators = false;
    if (!agent_socket.empty()) {
      if (!scheduler.empty()) {
        throw StatusError(absl::InvalidArgumentError(
            "give scheduler= (the agent runs in this process) or "
            "agent_socket= (a dcp-agent beside it), not both"));
      }
      options.mode = ClientOptions::Mode::kSidecar;
      options.agent_socket = agent_socket;
      options.rank = rank;
    } else {
      if (scheduler.empty()) {
        throw StatusError(absl::InvalidArgumentError(
            "dcp.Client needs scheduler=\"HOST:PORT\" or agent_socket=PATH"));
      }
      options.agent.scheduler_address = scheduler;
      options.agent.security = security;
      options.agent.rank = rank;
      options.agent.world_size = world_size;
      options.agent.connect_timeout =
          Seconds(connect_timeout, "connect_timeout");
      options.agent.warm_groups = false;
    }
    py::gil_scoped_release unlocked;
    client_ = OrThrow(Client::Connect(std::move(options)));
  }

  Step NextStep() {
    absl::StatusOr<Step> step;
    {
      py::gil_scoped_release unlocked;
      step = Live().NextStep();
    }
    return WithLossWeights(OrThrow(std::move(step)));
  }

  void ReportStep(const Step& step, const std::vector<double>& task_seconds,
                  double sync_seconds) {
    absl::Status status;
    {
      py::gil_scoped_release unlocked;
      status = Live().ReportStep(step, task_seconds, sync_seconds);
    }
    OrThrow(status);
  }

  int rank() { return Live().rank(); }
  std::string session_id() { return Live().session_id(); }

  // Stops the embedded agent (or drops the sidecar channel) now rather than
  // when Python collects the object.
  void Close() {
    py::gil_scoped_release unlocked;
    client_.reset();
  }

 private:
  Client& Live() {
    if (client_ == nullptr) {
      throw StatusError(
          absl::FailedPreconditionError("the dcp client is closed"));
    }
    return *client_;
  }

  std::unique_ptr<Client> client_;
};

SyntheticCorpus MakeCorpus(int32_t vocab, uint64_t seed, int patterns,
                           double noise, int64_t max_length,
                           const std::string& text) {
  SyntheticCorpus::Options options;
  options.vocab = vocab;
  options.seed = seed;
  options.patterns = patterns;
  options.noise = noise;
  options.max_length = max_length;
  options.text = text;
  return SyntheticCorpus(std::move(options));
}

void DefineStep(py::module_& m) {
  py::class_<StepTask>(m, "Task", "One micro-step of a rank (see dcp.Client).")
      .def_readonly("task_index", &StepTask::task_index)
      .def_readonly("micro_step", &StepTask::micro_step)
      .def_readonly("samples", &StepTask::samples)
      .def_readonly("lengths", &StepTask::lengths)
      .def_readonly("loss_weights", &StepTask::loss_weights)
      .def_readonly("recompute", &StepTask::recompute)
      .def_readonly("group_ranks", &StepTask::group_ranks)
      .def_readonly("rendezvous_prefix", &StepTask::rendezvous_prefix)
      .def("__repr__", [](const StepTask& t) {
        return absl::StrCat("dcp.Task(task_index=", t.task_index,
                            ", samples=", t.samples.size(), ", group of ",
                            t.group_ranks.size(), ", recompute=", t.recompute,
                            ")");
      });
  py::class_<Step>(m, "Step", "One global batch as this rank sees it.")
      .def_readonly("step", &Step::step)
      .def_readonly("epoch", &Step::epoch)
      .def_readonly("total_tokens", &Step::total_tokens)
      .def_readonly("drained", &Step::drained)
      .def_readonly("tasks", &Step::tasks)
      .def_property_readonly(
          "plan",
          [](const Step& s) { return py::bytes(s.plan.SerializeAsString()); },
          "The step as the scheduler sent it for this rank: a serialized "
          "dcp.v1.RankStep (proto/plan.proto), for logs and tools.")
      .def("__repr__", [](const Step& s) {
        return s.drained ? std::string("dcp.Step(drained)")
                         : absl::StrCat("dcp.Step(step=", s.step,
                                        ", epoch=", s.epoch, ", tasks=",
                                        s.tasks.size(), ")");
      });
}

/// common/security_options.h's fields, for dcp.Client's keyword arguments.
void DefineSecurityOptions(py::module_& m) {
  py::class_<SecurityOptions>(m, "SecurityOptions")
      .def(py::init<>())
      .def_readwrite("tls_cert", &SecurityOptions::tls_cert)
      .def_readwrite("tls_key", &SecurityOptions::tls_key)
      .def_readwrite("tls_ca", &SecurityOptions::tls_ca)
      .def_readwrite("tls_server_name", &SecurityOptions::tls_server_name)
      .def_readwrite("auth_token_file", &SecurityOptions::auth_token_file)
      .def_readwrite("insecure", &SecurityOptions::insecure)
      .def_readwrite("job_id", &SecurityOptions::job_id);
}

void DefineClient(py::module_& m) {
  py::class_<PyClient>(m, "Client")
      .def(py::init<const std::string&, int, int, const std::string&, double,
                    double, double, const SecurityOptions&>(),
           py::arg("scheduler"), py::arg("rank"), py::arg("world_size"),
           py::arg("agent_socket"), py::arg("step_timeout"),
           py::arg("connect_timeout"), py::arg("rpc_timeout"),
           py::arg("security"))
      .def("next_step", &PyClient::NextStep)
      .def("report_step", &PyClient::ReportStep, py::arg("step"),
           py::arg("task_seconds"), py::arg("sync_seconds") = 0.0)
      .def_property_readonly("rank", &PyClient::rank)
      .def_property_readonly("session_id", &PyClient::session_id)
      .def("close", &PyClient::Close);
}

void DefineCorpus(py::module_& m) {
  py::class_<SyntheticCorpus>(m, "SyntheticCorpus")
      .def(py::init(&MakeCorpus), py::arg("vocab") = 256, py::arg("seed") = 0,
           py::arg("patterns") = 4, py::arg("noise") = 0.05,
           py::arg("max_length") = int64_t{1} << 20, py::arg("text") = "")
      .def(
          "tokens",
          [](const SyntheticCorpus& corpus, int64_t sample, int64_t length) {
            TokenSample s = OrThrow(corpus.Tokens(sample, length));
            return std::make_pair(std::move(s.inputs), std::move(s.targets));
          },
          py::arg("sample"), py::arg("length"),
          "(inputs, targets) of `sample` truncated to `length` tokens: "
          "lists of token ids, targets[t] the token after inputs[t].");
}

}  // namespace
}  // namespace dcp::python

PYBIND11_MODULE(_dcp, m) {
  using namespace dcp::python;  // NOLINT: the module's definitions.
  m.doc() = "dcp's C++ client library (see the dcp package).";
  static py::exception<StatusError> error(m, "Error", PyExc_RuntimeError);
  py::register_exception_translator([](std::exception_ptr thrown) {
    try {
      if (thrown) std::rethrow_exception(thrown);
    } catch (const StatusError& e) {
      py::object type = py::reinterpret_borrow<py::object>(error);
      py::object instance = type(e.what());
      instance.attr("code") =
          absl::StatusCodeToString(e.status().code());
      PyErr_SetObject(error.ptr(), instance.ptr());
    }
  });
  DefineStep(m);
  DefineSecurityOptions(m);
  DefineClient(m);
  DefineCorpus(m);
}
