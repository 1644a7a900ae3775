#include "kernels/cpu/blas_threads.h"

#include <cblas.h>

namespace hap::cpu {

void SingleThreadedBlas() {
  static const bool done = [] {
    openblas_set_num_threads(1);
    return true;
  }();
  (void)done;
}

}  // namespace hap::cpu
