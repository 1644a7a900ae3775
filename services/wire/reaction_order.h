// The order gRPC's callback API guarantees between the calls of one server reactor, told to
// ThreadSanitizer (base/tsan.h): Debian's gRPC is not built with TSan, which therefore sees none
// of the locks and queues that carry these guarantees and reports every hand-over of a reactor
// between gRPC's threads as a race. The edges, each with its own tag so that one does not order
// another's calls (a StartWrite on a worker says nothing about OnCancel):
//   kBound  the handler returned the reactor to gRPC       → OnCancel
//   kRead   StartRead                                      → its OnReadDone
//   kWrite  StartWrite                                     → its OnWriteDone
//   kDone   Finish, and the end of every other reaction     → OnDone
// The calls themselves (StartRead, StartWrite, Finish: gRPC's code, inlined from its headers) run
// in a GrpcCode scope, so TSan ignores their accesses as it ignores libgrpc's. Empty and free
// outside the HAP_TSAN build.
#pragma once

#include <cstdint>

#include "base/tsan.h"

namespace hap::svc {

// Around a call into gRPC's reactor API: `{ GrpcCode in_grpc; StartWrite(&msg); }`.
using GrpcCode = TsanIgnoreAccesses;

class ReactionOrder {
 public:
  enum Edge { kBound = 0, kRead = 1, kWrite = 2, kDone = 3 };

  // Just before the call that starts the edge (returning from the handler, StartRead,
  // StartWrite, Finish) or at the end of a reaction (kDone).
  void Before(Edge edge) {
#ifdef HAP_TSAN_ENABLED
    HappensBefore(&tags_[edge]);
#else
    (void)edge;
#endif
  }
  // First thing in the reaction the edge leads to.
  void After(Edge edge) {
#ifdef HAP_TSAN_ENABLED
    HappensAfter(&tags_[edge]);
#else
    (void)edge;
#endif
  }

 private:
#ifdef HAP_TSAN_ENABLED
  uint64_t tags_[4] = {};  // one 8-byte cell per edge
#endif
};

}  // namespace hap::svc
