// Overloaded{lambdas...}: one callable with each lambda's operator(), for std::visit over a
// variant (the ops of a planned step, kernels/step.h).
#pragma once

namespace hap {

template <typename... Fs>
struct Overloaded : Fs... {
  using Fs::operator()...;
};
template <typename... Fs>
Overloaded(Fs...) -> Overloaded<Fs...>;

}  // namespace hap
