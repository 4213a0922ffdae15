/* Internal (L0): every public struct with a head (include/reel/reel.h, "Every
 * struct that crosses the ABI"), as reel_struct_kind for core/opts.h's
 * checks: its name in messages, its _INIT, magic, first form and size. */
#ifndef REEL_CORE_ABI_H
#define REEL_CORE_ABI_H

#include "core/opts.h"

extern const reel_struct_kind reel_abi_ctx_opts, reel_abi_compile_opts, reel_abi_comm_opts;
extern const reel_struct_kind reel_abi_moe_params;
extern const reel_struct_kind reel_abi_mla_params;
extern const reel_struct_kind reel_abi_attn_params, reel_abi_dcp_layout, reel_abi_step_info, reel_abi_loop_info;
extern const reel_struct_kind reel_abi_plan_stats, reel_abi_placement, reel_abi_node_info;
extern const reel_struct_kind reel_abi_plan_memory, reel_abi_op_span;
extern const reel_struct_kind reel_abi_hazard, reel_abi_check_access;
extern const reel_struct_kind reel_abi_st_tensor, reel_abi_st_entry;
extern const reel_struct_kind reel_abi_model_opts, reel_abi_model_info, reel_abi_model_tensor;

/* All of them, for tests. */
extern const reel_struct_kind *const reel_abi_all[];
extern const int reel_abi_count;

#endif
