/* Replays fuzz inputs without libFuzzer: each argument is a file or a folder
 * of files, fed once to the target's LLVMFuzzerTestOneInput. meson test runs
 * the seed corpora (and every reproducer kept there) this way in the normal
 * and sanitizer builds. */
#include <dirent.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "fuzz.h"

static int run_file(const char *path)
{
    FILE *f = fopen(path, "rb");
    if (!f) {
        fprintf(stderr, "replay: cannot open %s\n", path);
        return 1;
    }
    uint8_t *buf = NULL;
    size_t n = 0, cap = 0;
    for (;;) {
        if (n == cap) {
            cap = cap ? 2 * cap : 4096;
            uint8_t *nb = realloc(buf, cap);
            if (!nb) {
                free(buf);
                fclose(f);
                return 1;
            }
            buf = nb;
        }
        size_t r = fread(buf + n, 1, cap - n, f);
        if (r == 0)
            break;
        n += r;
    }
    fclose(f);
    LLVMFuzzerTestOneInput(buf, n);
    free(buf);
    return 0;
}

static int cmp(const void *a, const void *b) { return strcmp(*(char *const *)a, *(char *const *)b); }

int main(int argc, char **argv)
{
    int bad = 0, runs = 0;
    for (int a = 1; a < argc; a++) {
        struct stat st;
        if (stat(argv[a], &st) != 0) {
            fprintf(stderr, "replay: no such file or folder: %s\n", argv[a]);
            return 1;
        }
        if (!S_ISDIR(st.st_mode)) {
            bad |= run_file(argv[a]);
            runs++;
            continue;
        }
        DIR *d = opendir(argv[a]);
        if (!d)
            return 1;
        char **names = NULL;
        size_t nn = 0;
        struct dirent *e;
        while ((e = readdir(d))) {
            if (e->d_name[0] == '.')
                continue;
            names = realloc(names, (nn + 1) * sizeof(*names));
            names[nn] = malloc(strlen(argv[a]) + strlen(e->d_name) + 2);
            sprintf(names[nn], "%s/%s", argv[a], e->d_name);
            nn++;
        }
        closedir(d);
        qsort(names, nn, sizeof(*names), cmp);
        for (size_t i = 0; i < nn; i++) {
            bad |= run_file(names[i]);
            runs++;
            free(names[i]);
        }
        free(names);
    }
    printf("replay: %d inputs, all invariants held\n", runs);
    return bad || runs == 0;
}
