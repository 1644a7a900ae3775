// OpenBLAS runs on one thread inside this project's kernels: they split their work over the
// default pool themselves and call BLAS from each pool thread. Letting OpenBLAS start its own
// threads as well oversubscribed the cores, and its idle threads spin (sched_yield) between
// calls, taking a third of a 2-core machine's time away from the pool during a prefill.
#pragma once

namespace hap::cpu {

// Sets OpenBLAS to one thread, once per process; every kernel that calls BLAS calls this first.
void SingleThreadedBlas();

}  // namespace hap::cpu
