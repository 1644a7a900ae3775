#include "telemetry/tracer.h"

#include <atomic>
#include <chrono>
#include <cstring>
#include <mutex>
#include <random>
#include <thread>
#include <vector>

namespace hap::telemetry {
namespace {

std::mt19937_64& Generator() {
  thread_local std::mt19937_64 gen([] {
    std::random_device rd;
    std::seed_seq seq{
        rd(),
        rd(),
        rd(),
        rd(),
        static_cast<unsigned>(std::hash<std::thread::id>()(std::this_thread::get_id())),
        static_cast<unsigned>(std::chrono::steady_clock::now().time_since_epoch().count())};
    return std::mt19937_64(seq);
  }());
  return gen;
}

void RandomBytes(uint8_t* out, size_t n) {
  for (size_t i = 0; i < n; i += 8) {
    const uint64_t v = Generator()();
    std::memcpy(out + i, &v, std::min<size_t>(8, n - i));
  }
}

std::atomic<const Tracer*> g_tracer{nullptr};
std::mutex g_tracers_mu;
std::vector<std::shared_ptr<Tracer>>& Installed() {
  static auto* tracers = new std::vector<std::shared_ptr<Tracer>>();  // kept for the process
  return *tracers;
}

// Random bytes, drawn again while they are all zero (the invalid id).
template <typename Id>
Id NewValidId() {
  Id id;
  do {
    RandomBytes(id.bytes.data(), id.bytes.size());
  } while (!id.valid());
  return id;
}

}  // namespace

TraceId NewTraceId() { return NewValidId<TraceId>(); }

SpanId NewSpanId() { return NewValidId<SpanId>(); }

Tracer::Tracer(TraceSampler sampler, std::shared_ptr<SpanProcessor> processor)
    : sampler_(sampler), processor_(std::move(processor)) {}

Span Tracer::StartSpan(std::string_view name, SpanKind kind, const SpanContext& parent,
                       uint64_t start_unix_ns) const {
  if (processor_ == nullptr) return Span();
  SpanContext context;
  const bool has_parent = parent.valid();
  context.trace_id = has_parent ? parent.trace_id : NewTraceId();
  context.span_id = NewSpanId();
  if (has_parent) context.trace_state = parent.trace_state;
  const bool sampled = sampler_.ShouldSample(has_parent ? &parent : nullptr, context.trace_id);
  context.flags = sampled ? kSampledFlag : 0;
  if (!sampled) return Span(std::move(context), nullptr, nullptr);
  auto data = std::make_unique<SpanData>();
  data->context = context;
  if (has_parent) {
    data->parent_span_id = parent.span_id;
    data->parent_remote = parent.remote;
  }
  data->name = std::string(name);
  data->kind = kind;
  data->start_unix_ns = start_unix_ns != 0 ? start_unix_ns : NowUnixNanos();
  return Span(std::move(context), std::move(data), processor_.get());
}

const Tracer& GlobalTracer() {
  static const Tracer kDisabled;
  const Tracer* t = g_tracer.load(std::memory_order_acquire);
  return t != nullptr ? *t : kDisabled;
}

void SetGlobalTracer(std::shared_ptr<Tracer> tracer) {
  std::lock_guard<std::mutex> lock(g_tracers_mu);
  Installed().push_back(tracer);
  g_tracer.store(tracer.get(), std::memory_order_release);
}

}  // namespace hap::telemetry
