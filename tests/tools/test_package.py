#!/usr/bin/env python3
"""reel as a packager ships it (issue 12).

  test_package.py exports SRC BUILD   libreel.so exports the public API only
  test_package.py install SRC BUILD   installed into a temporary prefix, a program
                                      outside the tree builds against it with
                                      pkg-config (shared, --static) and CMake, and
                                      Python's ctypes loads the library

Exit status 0 pass, 1 fail, 77 skip (meson's code): a sanitizer build, or no nm.
"""
import glob
import os
import shutil
import subprocess
import sys
import tempfile

PROGRAM = r"""
#include <reel/reel.h>
#include <stdio.h>
int main(void)
{
    reel_ctx_opts o = REEL_CTX_OPTS_INIT;
    o.backend = REEL_BACKEND_HOST;
    reel_ctx *ctx;
    if (reel_ctx_create(&o, &ctx) != REEL_OK) return 1;
    reel_graph *g;
    if (reel_graph_create(ctx, &g) != REEL_OK) return 1;
    reel_graph_destroy(g);
    reel_ctx_destroy(ctx);
    printf("reel %d\n", reel_version());
    return reel_version() / 100 == REEL_VERSION_NUMBER / 100 ? 0 : 1;
}
"""

CMAKELISTS = """
cmake_minimum_required(VERSION 3.16)
project(reel_user C)
find_package(reel 0.2 REQUIRED)
add_executable(user_shared main.c)
target_link_libraries(user_shared PRIVATE reel::reel)
add_executable(user_static main.c)
target_link_libraries(user_static PRIVATE reel::reel_static)
"""

failures = []


def check(cond, what):
    print(("ok    " if cond else "FAIL  ") + what, flush=True)
    if not cond:
        failures.append(what)
    return cond


def run(cmd, env=None, cwd=None):
    r = subprocess.run(cmd, env=env, cwd=cwd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                       shell=isinstance(cmd, str))
    if r.returncode != 0:
        print(f"$ {cmd}\n{r.stdout}", flush=True)
    return r


def public_names(src):
    headers = sorted(glob.glob(os.path.join(src, "include", "reel", "*.h")))
    out = subprocess.check_output([sys.executable, os.path.join(src, "tools", "export-map.py"), "--list"] + headers,
                                  text=True)
    return set(out.split())


def exported(lib):
    out = subprocess.check_output(["nm", "-D", "--defined-only", lib], text=True)
    return {line.split()[-1].split("@")[0] for line in out.splitlines() if line.strip()}


def check_exports(src, lib):
    names, syms = public_names(src), exported(lib)
    extra = sorted(syms - names)
    check(not extra, f"{os.path.basename(lib)} exports only the public API (extra: {extra[:12]})")
    check(not any(s.startswith("_Z") for s in syms), "no C++ symbols exported")
    missing = sorted(names - syms)
    check(not missing, f"every function of include/reel/*.h is exported (missing: {missing[:12]})")


def test_exports(src, build):
    if not shutil.which("nm"):
        return 77
    libs = [p for p in glob.glob(os.path.join(build, "libreel.so.*.*.*")) if os.path.isfile(p)]
    if not check(len(libs) == 1, "the build has one libreel.so.X.Y.Z"):
        return 1
    check_exports(src, libs[0])
    return 1 if failures else 0


def pkg_env(dest, prefix):
    env = dict(os.environ)
    root = dest + prefix
    env["PKG_CONFIG_PATH"] = ":".join(glob.glob(os.path.join(root, "**", "pkgconfig"), recursive=True))
    env["PKG_CONFIG_ALLOW_SYSTEM_CFLAGS"] = env["PKG_CONFIG_ALLOW_SYSTEM_LIBS"] = "1"
    return env


def test_install(src, build):
    intro = subprocess.check_output(["meson", "introspect", build, "--buildoptions"], text=True)
    import json
    opts = {o["name"]: o["value"] for o in json.loads(intro)}
    if opts.get("b_sanitize", "none") != "none":
        print("skip: a sanitizer build (its library needs the sanitizer runtime)")
        return 77
    prefix = opts["prefix"]
    tmp = tempfile.mkdtemp(prefix="reel-install-")
    try:
        dest = os.path.join(tmp, "dest")
        r = run(["meson", "install", "-C", build, "--no-rebuild", "--quiet", "--destdir", dest])
        if not check(r.returncode == 0, "meson install into a temporary prefix"):
            return 1
        root = dest + prefix
        libdir = os.path.dirname(glob.glob(os.path.join(root, "**", "libreel.a"), recursive=True)[0])
        real = [p for p in glob.glob(os.path.join(libdir, "libreel.so.*.*.*")) if os.path.isfile(p)]
        check(len(real) == 1 and os.path.islink(os.path.join(libdir, "libreel.so"))
              and os.path.islink(os.path.join(libdir, "libreel.so.0")), "libreel.so -> libreel.so.0 -> libreel.so.0.x.y")
        soname = run(f"readelf -d '{real[0]}' | grep SONAME").stdout
        check("[libreel.so.0]" in soname, f"the soname is libreel.so.0 ({soname.strip()})")
        if shutil.which("nm"):
            check_exports(src, real[0])
        check(os.path.isfile(os.path.join(root, "share", "doc", "reel", "LICENSE")), "LICENSE installed")
        pc = open(os.path.join(libdir, "pkgconfig", "reel.pc")).read()
        check("nccl" not in pc, "reel.pc names no NCCL (nothing links it)")
        check(not any(w.startswith("/") and w.endswith(".so") for w in pc.split()), "reel.pc names no library by path")

        work = os.path.join(tmp, "user")
        os.makedirs(work)
        with open(os.path.join(work, "main.c"), "w") as f:
            f.write(PROGRAM)
        env = pkg_env(dest, prefix)
        pcdef = f"--define-variable=prefix={root}"  # the pc file's own prefix, moved into the temp dir
        run_env = dict(os.environ, LD_LIBRARY_PATH=libdir)
        cc = os.environ.get("CC", "cc")

        r = run(f"{cc} -std=c11 -Wall -Werror main.c -o user_shared $(pkg-config {pcdef} --cflags --libs reel)", env, work)
        if check(r.returncode == 0, "cc main.c $(pkg-config --cflags --libs reel)"):
            r = run(["./user_shared"], run_env, work)
            check(r.returncode == 0, "the program runs against the installed libreel.so")

        libs = run(f"pkg-config {pcdef} --static --libs reel", env).stdout.split()
        libs = ["-l:libreel.a" if w == "-lreel" else w for w in libs]  # the archive, not the .so beside it
        r = run(f"{cc} -std=c11 main.c -o user_static $(pkg-config {pcdef} --cflags reel) {' '.join(libs)}", env, work)
        if check(r.returncode == 0, "cc main.c with pkg-config --static --libs reel (libreel.a)"):
            needed = run(f"readelf -d ./user_static", cwd=work).stdout
            check("libreel" not in needed, "the static program needs no libreel.so")
            r = run(["./user_static"], cwd=work)
            check(r.returncode == 0, "the statically linked program runs")

        if shutil.which("cmake"):
            with open(os.path.join(work, "CMakeLists.txt"), "w") as f:
                f.write(CMAKELISTS)
            cb = os.path.join(work, "cmake-build")
            r = run(["cmake", "-S", work, "-B", cb, "-DCMAKE_PREFIX_PATH=" + root])
            if check(r.returncode == 0, "cmake: find_package(reel 0.2) and its targets"):
                r = run(["cmake", "--build", cb])
                if check(r.returncode == 0, "cmake --build (reel::reel and reel::reel_static)"):
                    check(run([os.path.join(cb, "user_shared")], run_env).returncode == 0, "cmake's shared program runs")
                    check(run([os.path.join(cb, "user_static")]).returncode == 0, "cmake's static program runs")
        else:
            print("skip  cmake: not installed")

        code = ("import ctypes,sys; l=ctypes.CDLL(sys.argv[1]); l.reel_version.restype=ctypes.c_int; "
                "print(l.reel_version())")
        r = run([sys.executable, "-c", code, os.path.join(libdir, "libreel.so.0")])
        check(r.returncode == 0 and r.stdout.strip().isdigit(), f"ctypes.CDLL loads libreel.so.0 ({r.stdout.strip()})")
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    return 1 if failures else 0


if __name__ == "__main__":
    if len(sys.argv) != 4 or sys.argv[1] not in ("exports", "install"):
        print(__doc__, file=sys.stderr)
        sys.exit(2)
    fn = test_exports if sys.argv[1] == "exports" else test_install
    sys.exit(fn(os.path.abspath(sys.argv[2]), os.path.abspath(sys.argv[3])))
