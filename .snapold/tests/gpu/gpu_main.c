/* main() of every gpu test program: without a visible GPU it names the
 * tests it skips and exits 77 (meson's SKIP); otherwise Criterion runs them. */
#include <criterion/criterion.h>
#include <criterion/internal/ordered-set.h>
#include <stdio.h>
#include <sys/wait.h>
#include <unistd.h>

#include "backend/backend.h"

/* Probed in a child process: a CUDA driver initialised in this process
 * would be unusable in the processes Criterion forks for the tests. */
static bool gpu_visible(void)
{
    pid_t pid = fork();
    if (pid == 0)
        _exit(reel_cuda_available() ? 0 : 1);
    int status = 0;
    if (pid < 0 || waitpid(pid, &status, 0) != pid)
        return false;
    return WIFEXITED(status) && WEXITSTATUS(status) == 0;
}

static void print_names(struct criterion_test_set *set)
{
    const char *sep = "";
    for (struct criterion_ordered_set_node *sn = set->suites->first; sn; sn = sn->next) {
        struct criterion_suite_set *suite = (void *)(sn + 1);
        for (struct criterion_ordered_set_node *tn = suite->tests ? suite->tests->first : NULL; tn; tn = tn->next) {
            struct criterion_test *t = (void *)(tn + 1);
            printf("%s%s::%s", sep, t->category, t->name);
            sep = ", ";
        }
    }
}

int main(int argc, char *argv[])
{
    struct criterion_test_set *tests = criterion_initialize();
    int rc = 0;
    if (!gpu_visible()) {
        printf("SKIP gpu suite: no GPU visible (tests: ");
        print_names(tests);
        printf(")\n");
        rc = 77;
    } else if (criterion_handle_args(argc, argv, true)) {
        rc = !criterion_run_all_tests(tests);
    }
    criterion_finalize(tests);
    return rc;
}
