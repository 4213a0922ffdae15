/* Status names and the library's version. */
#include "reel/reel.h"

int reel_version(void) { return REEL_VERSION_NUMBER; }

const char *reel_status_str(reel_status s)
{
    static const char *const names[REEL_STATUS_COUNT] = {
        [REEL_OK] = "REEL_OK",
        [REEL_E_INVALID_ARG] = "REEL_E_INVALID_ARG",
        [REEL_E_INVALID_USAGE] = "REEL_E_INVALID_USAGE",
        [REEL_E_SHAPE] = "REEL_E_SHAPE",
        [REEL_E_DTYPE] = "REEL_E_DTYPE",
        [REEL_E_NOT_FOUND] = "REEL_E_NOT_FOUND",
        [REEL_E_UNBOUND] = "REEL_E_UNBOUND",
        [REEL_E_NO_OUTPUT] = "REEL_E_NO_OUTPUT",
        [REEL_E_OOM] = "REEL_E_OOM",
        [REEL_E_LIMIT] = "REEL_E_LIMIT",
        [REEL_E_FALLBACK] = "REEL_E_FALLBACK",
        [REEL_E_BACKEND] = "REEL_E_BACKEND",
        [REEL_E_UNSUPPORTED] = "REEL_E_UNSUPPORTED",
        [REEL_E_VERSION] = "REEL_E_VERSION",
        [REEL_E_HAZARD] = "REEL_E_HAZARD",
        [REEL_E_INTERNAL] = "REEL_E_INTERNAL",
    };
    if ((int)s < 0 || s >= REEL_STATUS_COUNT)
        return "REEL_E_UNKNOWN";
    return names[s];
}
