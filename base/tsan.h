// ThreadSanitizer annotations for orderings TSan cannot see: a happens-before edge that an
// uninstrumented library (Debian's gRPC) provides through its own locks and atomics. Only the
// HAP_TSAN build (`make tsan`) defines them; elsewhere they compile to nothing.
#pragma once

#if defined(__SANITIZE_THREAD__)  // gcc
#define HAP_TSAN_ENABLED 1
#elif defined(__has_feature)
#if __has_feature(thread_sanitizer)  // clang
#define HAP_TSAN_ENABLED 1
#endif
#endif

#ifdef HAP_TSAN_ENABLED
extern "C" void __tsan_acquire(void* addr);
extern "C" void __tsan_release(void* addr);
extern "C" void __tsan_ignore_thread_begin();
extern "C" void __tsan_ignore_thread_end();
#endif

namespace hap {

// What this thread did before HappensBefore(tag) happens before what any thread does after a
// later HappensAfter(tag). `tag` is any address that stays valid in between; TSan keeps one
// synchronisation object per 8-byte cell, so two tags must be 8 bytes apart.
inline void HappensBefore(const void* tag) {
#ifdef HAP_TSAN_ENABLED
  __tsan_release(const_cast<void*>(tag));
#else
  (void)tag;
#endif
}

inline void HappensAfter(const void* tag) {
#ifdef HAP_TSAN_ENABLED
  __tsan_acquire(const_cast<void*>(tag));
#else
  (void)tag;
#endif
}

// Within the scope TSan neither checks nor records this thread's loads and stores (it still sees
// its locks and atomics): for a library's code compiled into ours from its headers, which works
// on the library's own objects in an order only the library keeps.
class TsanIgnoreAccesses {
 public:
#ifdef HAP_TSAN_ENABLED
  TsanIgnoreAccesses() { __tsan_ignore_thread_begin(); }
  ~TsanIgnoreAccesses() { __tsan_ignore_thread_end(); }
#else
  TsanIgnoreAccesses() {}  // user-provided, so a scope object is not an "unused variable"
#endif
  TsanIgnoreAccesses(const TsanIgnoreAccesses&) = delete;
  TsanIgnoreAccesses& operator=(const TsanIgnoreAccesses&) = delete;
};

}  // namespace hap
