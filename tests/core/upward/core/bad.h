/* A seeded upward include: the layer check must refuse it. */
#include "runtime/plan.h"
