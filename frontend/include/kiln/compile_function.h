// kiln/compile_function.h - kiln::compile(fn): compile any callable (as
// torch.compile of a function). Included by kiln/compile.h; see the guards
// and what is baked in there ("Compiling a function").
//
//   auto step = kiln::compile([&](const Tensor &x, const Tensor &y) {
//     return F::cross_entropy(model->forward(x), y);
//   });
//   for (...) {
//     Tensor loss = step(x, y);   // traced + compiled on the first call
//     opt.zero_grad();
//     loss.backward();            // the compiled backward fills model's .grad
//     opt.step();
//   }
#pragma once

#include <array>
#include <cstdint>
#include <functional>
#include <memory>
#include <sstream>
#include <string>
#include <tuple>
#include <type_traits>
#include <utility>
#include <vector>

namespace kiln {

namespace detail {

template <class A> constexpr bool is_tensor_arg_v = std::is_same_v<std::decay_t<A>, Tensor>;

/// The module standing for a compiled function (no parameters; its name
/// gives the CompiledModule the name "CompiledFunction").
std::shared_ptr<nn::Module> function_module();

/// Appends argument `index` of a compiled function to `call`: a tensor as an
/// input, an int / double / bool / string as a value guard. Any other type
/// does not compile (static_assert naming the supported types).
template <class A> void add_argument(CallSpec &call, size_t index, const A &arg) {
  using T = std::decay_t<A>;
  const std::string name = "argument " + std::to_string(index);
  std::ostringstream value;
  if constexpr (std::is_same_v<T, Tensor>) {
    call.inputs.push_back(arg);
    call.input_names.push_back(name);
    return;
  } else if constexpr (std::is_same_v<T, bool>) {
    call.scalars.push_back({name, "bool", arg ? "true" : "false"});
  } else if constexpr (std::is_integral_v<T>) {
    call.scalars.push_back({name, "int", std::to_string(static_cast<int64_t>(arg))});
  } else if constexpr (std::is_floating_point_v<T>) {
    value.precision(17);
    value << static_cast<double>(arg);
    call.scalars.push_back({name, "double", value.str()});
  } else if constexpr (std::is_convertible_v<const T &, std::string>) {
    call.scalars.push_back({name, "string", "\"" + std::string(arg) + "\""});
  } else {
    static_assert(std::is_same_v<T, Tensor>,
                  "kiln::compile(fn): arguments must be Tensor, an integer, a floating point number, bool or "
                  "std::string");
  }
}

/// For each argument, its position among the tensor arguments.
template <class... Args> constexpr std::array<size_t, sizeof...(Args)> tensor_positions() {
  std::array<size_t, sizeof...(Args)> out{};
  constexpr bool is_tensor[] = {is_tensor_arg_v<Args>..., false};
  size_t n = 0;
  for (size_t i = 0; i < sizeof...(Args); ++i) {
    out[i] = n;
    if (is_tensor[i]) ++n;
  }
  return out;
}

/// The argument the function is called with: for a tensor argument, the
/// tensor standing for it (traced copy or real tensor); else the value.
template <class A> decltype(auto) pick(A &arg, const std::vector<Tensor> &tensors, size_t position) {
  if constexpr (is_tensor_arg_v<A>)
    return static_cast<const Tensor &>(tensors[position]);
  else
    return static_cast<A &>(arg);
}
template <class A> using picked_t = std::conditional_t<is_tensor_arg_v<A>, const Tensor &, A &>;

/// The outputs of a function as a vector: a Tensor, a std::vector<Tensor>,
/// or a std::tuple / std::pair of Tensors.
template <class R> struct Outputs {
  static_assert(std::is_same_v<R, Tensor>,
                "kiln::compile(fn): the function must return a Tensor, a std::vector<Tensor> or a std::tuple of "
                "Tensors");
  static std::vector<Tensor> flatten(const Tensor &t) { return {t}; }
  static Tensor unflatten(std::vector<Tensor> v) { return v.at(0); }
};
template <> struct Outputs<std::vector<Tensor>> {
  static std::vector<Tensor> flatten(std::vector<Tensor> v) { return v; }
  static std::vector<Tensor> unflatten(std::vector<Tensor> v) { return v; }
};
template <template <class...> class Tuple, class... Ts> struct TupleOutputs {
  static_assert((std::is_same_v<Ts, Tensor> && ...), "kiln::compile(fn): a returned tuple must hold only Tensors");
  static std::vector<Tensor> flatten(const Tuple<Ts...> &t) {
    return std::apply([](const auto &...x) { return std::vector<Tensor>{x...}; }, t);
  }
  static Tuple<Ts...> unflatten(std::vector<Tensor> v) { return build(v, std::index_sequence_for<Ts...>{}); }
  template <size_t... Is> static Tuple<Ts...> build(const std::vector<Tensor> &v, std::index_sequence<Is...>) {
    return Tuple<Ts...>(v.at(Is)...);
  }
};
template <class... Ts> struct Outputs<std::tuple<Ts...>> : TupleOutputs<std::tuple, Ts...> {};
template <class A, class B> struct Outputs<std::pair<A, B>> : TupleOutputs<std::pair, A, B> {};

/// Calls `fn` with the tensors of `tensors` in place of its tensor arguments.
template <class F, class... Args, size_t... Is>
std::vector<Tensor> invoke_with(F &fn, const std::vector<Tensor> &tensors, std::index_sequence<Is...>, Args &...args) {
  constexpr std::array<size_t, sizeof...(Args)> positions = tensor_positions<Args...>();
  using R = std::decay_t<std::invoke_result_t<F &, picked_t<Args>...>>;
  return Outputs<R>::flatten(std::invoke(fn, pick(args, tensors, positions[Is])...));
}

}  // namespace detail

/// A compiled function (kiln::compile(fn)). Calling it with tensors and
/// non-tensor values guards them (shapes, dtypes, devices, requires_grad;
/// values), traces `fn` forward and backward on a miss, and returns what
/// `fn` returns, each output tensor with a grad_fn running the compiled
/// backward. Copies share one compiled cache.
template <class F> class CompiledFunction {
public:
  CompiledFunction(F fn, CompileOptions options)
      : fn_(std::make_shared<F>(std::move(fn))),
        engine_(std::make_shared<CompiledModule>(detail::function_module(), std::move(options),
                                                 CompiledModule::Kind::Function)) {}

  template <class... Args> auto operator()(Args &&...args) {
    using R = std::decay_t<std::invoke_result_t<F &, detail::picked_t<Args>...>>;
    detail::CallSpec call;
    size_t index = 0;
    (detail::add_argument(call, index++, args), ...);
    call.body = [this, &args...](const std::vector<Tensor> &tensors) {
      return detail::invoke_with(*fn_, tensors, std::index_sequence_for<Args...>{}, args...);
    };
    return detail::Outputs<R>::unflatten(engine_->call_compiled(call));
  }

  const CompileStats &stats() const { return engine_->stats(); }
  /// Ops at which the last call's graph was split (graph breaks), in order.
  const std::vector<std::string> &graph_breaks() const { return engine_->graph_breaks(); }
  /// The engine (CompiledModule of Kind::Function) that holds the cache.
  CompiledModule &engine() { return *engine_; }

private:
  std::shared_ptr<F> fn_;
  std::shared_ptr<CompiledModule> engine_;
};

/// Compiles any callable taking `const Tensor &` (or Tensor) and int /
/// double / bool / std::string arguments and returning a Tensor, a
/// std::vector<Tensor> or a std::tuple of Tensors (torch.compile of a
/// function). See kiln/compile.h, "Compiling a function", for the guards.
template <class F, class = std::enable_if_t<!std::is_convertible_v<F, std::shared_ptr<nn::Module>>>>
CompiledFunction<std::decay_t<F>> compile(F fn, CompileOptions options = {}) {
  return CompiledFunction<std::decay_t<F>>(std::move(fn), std::move(options));
}

}  // namespace kiln
