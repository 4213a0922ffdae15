/* Internal (L2): the storage dtypes of the host kernels live in core/dtype.h
 * (the host communicator's reductions use them too). */
#ifndef REEL_OPS_HOST_DTYPE_H
#define REEL_OPS_HOST_DTYPE_H

#include "core/dtype.h"

#endif
