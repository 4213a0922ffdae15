/* The public structs with a head. The first form of each is its head alone:
 * the magic and the version say what the bytes are, and the library reads
 * (or fills) exactly the fields the caller's size covers, the rest taking
 * their defaults; so any caller of 0.2 or later is accepted, however many
 * fields were appended since (docs/decisions.md, "One head for every
 * struct"). */
#include "core/abi.h"

#include "reel/comm.h"
#include "reel/memory.h"
#include "reel/models.h"
#include "reel/parallel.h"
#include "reel/safetensors.h"

#define KIND(name, what, type, MAGIC, INIT) \
    const reel_struct_kind reel_abi_##name = { what, #INIT, MAGIC, sizeof(reel_struct_head), sizeof(type) }

KIND(ctx_opts, "context options", reel_ctx_opts, REEL_CTX_OPTS_MAGIC, REEL_CTX_OPTS_INIT);
KIND(compile_opts, "compile options", reel_compile_opts, REEL_COMPILE_OPTS_MAGIC, REEL_COMPILE_OPTS_INIT);
KIND(comm_opts, "comm options", reel_comm_opts, REEL_COMM_OPTS_MAGIC, REEL_COMM_OPTS_INIT);
KIND(attn_params, "attention params", reel_attn_params, REEL_ATTN_PARAMS_MAGIC, REEL_ATTN_PARAMS_INIT);
KIND(moe_params, "MoE params", reel_moe_params, REEL_MOE_PARAMS_MAGIC, REEL_MOE_PARAMS_INIT);
KIND(mla_params, "MLA params", reel_mla_params, REEL_MLA_PARAMS_MAGIC, REEL_MLA_PARAMS_INIT);
KIND(dcp_layout, "DCP layout", reel_dcp_layout, REEL_DCP_LAYOUT_MAGIC, REEL_DCP_LAYOUT_INIT);
KIND(step_info, "step info", reel_step_info, REEL_STEP_INFO_MAGIC, REEL_STEP_INFO_INIT);
KIND(loop_info, "loop info", reel_loop_info, REEL_LOOP_INFO_MAGIC, REEL_LOOP_INFO_INIT);
KIND(plan_stats, "plan stats", reel_plan_stats, REEL_PLAN_STATS_MAGIC, REEL_PLAN_STATS_INIT);
KIND(placement, "placement", reel_placement, REEL_PLACEMENT_MAGIC, REEL_PLACEMENT_INIT);
KIND(node_info, "node info", reel_node_info, REEL_NODE_INFO_MAGIC, REEL_NODE_INFO_INIT);
KIND(plan_memory, "plan memory", reel_plan_memory, REEL_PLAN_MEMORY_MAGIC, REEL_PLAN_MEMORY_INIT);
KIND(op_span, "op span", reel_op_span, REEL_OP_SPAN_MAGIC, REEL_OP_SPAN_INIT);
KIND(hazard, "hazard", reel_hazard, REEL_HAZARD_MAGIC, REEL_HAZARD_INIT);
KIND(check_access, "check access", reel_check_access, REEL_CHECK_ACCESS_MAGIC, REEL_CHECK_ACCESS_INIT);
KIND(st_tensor, "safetensors tensor", reel_st_tensor, REEL_ST_TENSOR_MAGIC, REEL_ST_TENSOR_INIT);
KIND(st_entry, "safetensors entry", reel_st_entry, REEL_ST_ENTRY_MAGIC, REEL_ST_ENTRY_INIT);
KIND(model_opts, "model options", reel_model_opts, REEL_MODEL_OPTS_MAGIC, REEL_MODEL_OPTS_INIT);
KIND(model_info, "model info", reel_model_info, REEL_MODEL_INFO_MAGIC, REEL_MODEL_INFO_INIT);
KIND(model_tensor, "model tensor", reel_model_tensor, REEL_MODEL_TENSOR_MAGIC, REEL_MODEL_TENSOR_INIT);

const reel_struct_kind *const reel_abi_all[] = {
    &reel_abi_ctx_opts,   &reel_abi_compile_opts, &reel_abi_comm_opts,  &reel_abi_attn_params,
    &reel_abi_dcp_layout, &reel_abi_step_info,    &reel_abi_plan_stats, &reel_abi_placement,
    &reel_abi_node_info,  &reel_abi_plan_memory,  &reel_abi_op_span,    &reel_abi_hazard,
    &reel_abi_check_access, &reel_abi_st_tensor,  &reel_abi_st_entry,
    &reel_abi_model_opts,   &reel_abi_model_info, &reel_abi_model_tensor, &reel_abi_moe_params,
    &reel_abi_loop_info,    &reel_abi_mla_params,
};
const int reel_abi_count = (int)(sizeof reel_abi_all / sizeof reel_abi_all[0]);
