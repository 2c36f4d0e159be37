#include "train/checkpoint.h"

#include <ATen/ATen.h>
#include <ATen/CPUGeneratorImpl.h>
#include <torch/csrc/autograd/autograd.h>
#include <torch/csrc/autograd/custom_function.h>

#include <exception>
#include <mutex>
#include <utility>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"

namespace dcp::train {
namespace {

using torch::autograd::AutogradContext;
using torch::autograd::variable_list;

// What the backward pass needs besides the saved input; travels in the
// context's saved_data as a capsule.
struct CheckpointState : torch::CustomClassHolder {
  LayerFunction fn;
  std::vector<at::Tensor> params;
  bool input_requires_grad = false;
  bool preserve_rng_state = false;
  at::Tensor rng_state;
};

at::Tensor GetCpuRngState() {
  at::Generator gen = at::detail::getDefaultCPUGenerator();
  std::lock_guard<std::mutex> lock(gen.mutex());
  return gen.get_state();
}

void SetCpuRngState(const at::Tensor& state) {
  at::Generator gen = at::detail::getDefaultCPUGenerator();
  std::lock_guard<std::mutex> lock(gen.mutex());
  gen.set_state(state);
}

struct CheckpointFunction : torch::autograd::Function<CheckpointFunction> {
  // Runs under no-grad (Function::apply disables it), so fn's activations
  // are freed as soon as it returns.
  static at::Tensor forward(AutogradContext* ctx, const at::Tensor& input,
                            at::TensorList params,
                            c10::intrusive_ptr<CheckpointState> state) {
    if (state->preserve_rng_state) state->rng_state = GetCpuRngState();
    at::Tensor output = state->fn(input);
    ctx->save_for_backward({input});
    ctx->saved_data["state"] = c10::IValue::make_capsule(std::move(state));
    return output;
  }

  static variable_list backward(AutogradContext* ctx,
                                variable_list grad_outputs) {
    c10::intrusive_ptr<torch::CustomClassHolder> capsule =
        ctx->saved_data["state"].toCapsule();
    auto* state = static_cast<CheckpointState*>(capsule.get());
    at::Tensor input = ctx->get_saved_variables()[0].detach();
    input.requires_grad_(state->input_requires_grad);

    at::Tensor output;
    {
      at::AutoGradMode enable_grad(true);
      at::Tensor rng_now;
      if (state->preserve_rng_state) {
        rng_now = GetCpuRngState();
        SetCpuRngState(state->rng_state);
      }
      output = state->fn(input);
      if (state->preserve_rng_state) SetCpuRngState(rng_now);
    }

    // Gradients for [input?, params that need one...].
    std::vector<at::Tensor> wrt;
    if (state->input_requires_grad) wrt.push_back(input);
    std::vector<int> param_slot(state->params.size(), -1);
    for (size_t i = 0; i < state->params.size(); ++i) {
      if (state->params[i].requires_grad()) {
        param_slot[i] = static_cast<int>(wrt.size());
        wrt.push_back(state->params[i]);
      }
    }
    variable_list grads;
    if (!wrt.empty() && output.requires_grad()) {
      grads = torch::autograd::grad({output}, wrt, {grad_outputs[0]},
                                    /*retain_graph=*/false,
                                    /*create_graph=*/false,
                                    /*allow_unused=*/true);
    }
    // One entry per forward argument tensor, then one for the state.
    variable_list result;
    result.reserve(state->params.size() + 2);
    result.push_back(
        state->input_requires_grad && !grads.empty() ? grads[0] : at::Tensor());
    for (size_t i = 0; i < state->params.size(); ++i) {
      result.push_back(param_slot[i] >= 0 && !grads.empty()
                           ? grads[param_slot[i]]
                           : at::Tensor());
    }
    result.emplace_back();
    return result;
  }
};

}  // namespace

absl::StatusOr<at::Tensor> Checkpoint(LayerFunction fn, const at::Tensor& input,
                                      const std::vector<at::Tensor>& params,
                                      CheckpointOptions options) {
  if (!fn) return absl::InvalidArgumentError("Checkpoint: empty function");
  if (!input.defined()) {
    return absl::InvalidArgumentError("Checkpoint: undefined input");
  }
  auto state = c10::make_intrusive<CheckpointState>();
  state->fn = std::move(fn);
  state->params = params;
  state->input_requires_grad = input.requires_grad();
  state->preserve_rng_state = options.preserve_rng_state;
  try {
    return CheckpointFunction::apply(input, at::TensorList(params),
                                     std::move(state));
  } catch (const c10::Error& e) {
    return absl::InternalError(absl::StrCat("checkpointed layer failed: ",
                                            e.what_without_backtrace()));
  } catch (const std::exception& e) {
    return absl::InternalError(
        absl::StrCat("checkpointed layer failed: ", e.what()));
  }
}

}  // namespace dcp::train
