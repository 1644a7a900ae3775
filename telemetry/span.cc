#include "telemetry/span.h"

#include <algorithm>

namespace hap::telemetry {

const AttributeValue* SpanData::Find(std::string_view key) const {
  for (const Attribute& a : attributes) {
    if (a.key == key) return &a.value;
  }
  return nullptr;
}

uint64_t NowUnixNanos() {
  return static_cast<uint64_t>(std::chrono::duration_cast<std::chrono::nanoseconds>(
                                   std::chrono::system_clock::now().time_since_epoch())
                                   .count());
}

uint64_t ToUnixNanos(std::chrono::steady_clock::time_point t) {
  const auto now_steady = std::chrono::steady_clock::now();
  const int64_t delta =
      std::chrono::duration_cast<std::chrono::nanoseconds>(now_steady - t).count();
  return NowUnixNanos() - static_cast<uint64_t>(delta);
}

Span::Span(SpanContext context, std::unique_ptr<SpanData> data, SpanProcessor* processor)
    : context_(std::move(context)), data_(std::move(data)), processor_(processor) {}

Span::Span(Span&& other) noexcept
    : context_(std::move(other.context_)),
      data_(std::move(other.data_)),
      processor_(other.processor_) {}

Span& Span::operator=(Span&& other) noexcept {
  if (this != &other) {
    End();
    context_ = std::move(other.context_);
    data_ = std::move(other.data_);
    processor_ = other.processor_;
  }
  return *this;
}

Span& Span::SetAttributeValue(std::string_view key, AttributeValue value) {
  if (data_ == nullptr) return *this;
  for (Attribute& a : data_->attributes) {
    if (a.key == key) {
      a.value = std::move(value);
      return *this;
    }
  }
  if (data_->attributes.size() >= kMaxAttributes) {
    ++data_->dropped_attributes;
    return *this;
  }
  data_->attributes.push_back({std::string(key), std::move(value)});
  return *this;
}

void Span::AddEvent(std::string_view name, Attributes attributes) {
  if (data_ == nullptr) return;
  AddEventAt(name, NowUnixNanos(), std::move(attributes));
}

void Span::AddEventAt(std::string_view name, uint64_t time_unix_ns, Attributes attributes) {
  if (data_ == nullptr) return;
  if (data_->events.size() >= kMaxEvents) {
    ++data_->dropped_events;
    return;
  }
  data_->events.push_back({time_unix_ns, std::string(name), std::move(attributes)});
}

void Span::SetStatus(StatusCode code, std::string_view message) {
  if (data_ == nullptr) return;
  data_->status = code;
  data_->status_message = code == StatusCode::kError ? std::string(message) : std::string();
}

void Span::SetStartTime(uint64_t start_unix_ns) {
  if (data_ != nullptr) data_->start_unix_ns = start_unix_ns;
}

void Span::End(uint64_t end_unix_ns) {
  if (data_ == nullptr) return;
  data_->end_unix_ns = end_unix_ns != 0 ? end_unix_ns : NowUnixNanos();
  data_->end_unix_ns = std::max(data_->end_unix_ns, data_->start_unix_ns);
  std::unique_ptr<SpanData> data = std::move(data_);
  if (processor_ != nullptr) processor_->OnEnd(std::move(data));
}

}  // namespace hap::telemetry
