/* Internal (L1): the hazard checker. Its API is public (include/reel/memory.h)
 * because engineers testing allocators drive it directly; the executor and
 * the workspace allocator feed it through the same calls. */
#ifndef REEL_MEMORY_CHECKER_H
#define REEL_MEMORY_CHECKER_H

#include "reel/memory.h"

#endif
