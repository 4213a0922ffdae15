/* The backends' table (backend/registry.h) and the op registry's rows of
 * kernels that follow it (ops/registry.c). */
#include <criterion/criterion.h>
#include <string.h>

#include "backend/registry.h"
#include "ops/op.h"
#include "reel_config.h"

Test(registry, every_backend_kind_has_one_row_and_its_name_parses_back)
{
    cr_assert_eq(reel_backend_count(), REEL_BACKEND_CUDA, "one row per reel_backend_kind after AUTO");
    for (int k = REEL_BACKEND_AUTO + 1; k <= REEL_BACKEND_CUDA; k++) {
        const reel_backend_entry *b = reel_backend_of((reel_backend_kind)k);
        cr_assert_not_null(b, "kind %d has no row", k);
        reel_backend_kind back;
        cr_assert_eq(reel_backend_parse(b->name, &back), REEL_OK);
        cr_assert_eq(back, (reel_backend_kind)k);
        cr_assert_eq(reel_backend_of_comm_id(b->comm_id), b, "comm id kinds are distinct");
        cr_assert(b->available && b->create && b->comm_unique_id && b->comm_create && b->comm_group);
    }
    cr_assert_null(reel_backend_of(REEL_BACKEND_AUTO));
    cr_assert_null(reel_backend_of((reel_backend_kind)(REEL_BACKEND_CUDA + 1)));
}

Test(registry, auto_prefers_the_first_available_row_and_the_host_is_always_available)
{
    cr_assert(reel_backend_of(REEL_BACKEND_HOST)->available());
    cr_assert_eq(reel_backend_at(reel_backend_count() - 1)->kind, REEL_BACKEND_HOST, "the host is the last resort");
    char names[REEL_BACKEND_NAMES_MAX];
    reel_backend_names(names, sizeof names);
    cr_assert_str_eq(names, "auto, host, cuda");
}

Test(registry, every_backend_built_in_has_kernels_in_the_op_registry)
{
    for (int i = 0; i < reel_backend_count(); i++) {
        const reel_backend_entry *b = reel_backend_at(i);
        int n = -1;
        const reel_op_impl *const *impls = reel_registry_all(b->kind, &n);
        bool built = b->kind != REEL_BACKEND_CUDA || REEL_HAVE_CUDA;
        if (built) {
            cr_assert_not_null(impls, "backend '%s' has no row of kernels", b->name);
            cr_assert_gt(n, 0);
        } else {
            cr_assert_eq(n, 0);
        }
    }
}
