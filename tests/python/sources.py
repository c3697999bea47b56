"""python/setup.py builds the extension without CMake, from its own list
of libfirebreak's sources (LIB_SOURCES); CMake's libfirebreak is the
fb_libobj and fb_common targets.  This check fails when the two lists
differ (names.c and tier.c once went missing from setup.py: pip install
then failed at import with an undefined symbol), naming each file.

CMake-only files that setup.py leaves out on purpose: OPTIONAL below.

Run: sources.py SETUP_PY LIB_SOURCES_TXT   (the latter written by
python/CMakeLists.txt at configure, paths relative to src/)."""
import ast
import sys

# Built by CMake only where the compiler takes -mavx2; setup.py has no
# per-file flags, and hash.c works without it (FB_HAVE_XXHASH_AVX2 unset).
OPTIONAL = {"ckpt/hash_avx2.c"}


def setup_sources(path):
    """LIB_SOURCES of setup.py, read without running it."""
    tree = ast.parse(open(path).read(), path)
    for node in ast.walk(tree):
        if (isinstance(node, ast.Assign) and len(node.targets) == 1
                and getattr(node.targets[0], "id", None) == "LIB_SOURCES"):
            lists = ast.literal_eval(node.value)
            return {"%s/%s" % (comp, f) for comp, files in lists.items() for f in files}
    raise SystemExit("%s: no LIB_SOURCES = {...}" % path)


def main():
    if len(sys.argv) != 3:
        raise SystemExit("usage: sources.py SETUP_PY LIB_SOURCES_TXT")
    pip = setup_sources(sys.argv[1])
    cmake = {l.strip() for l in open(sys.argv[2]) if l.strip()}
    missing = sorted(cmake - pip - OPTIONAL)
    extra = sorted(pip - cmake)
    for f in missing:
        print("FAIL: src/%s is in CMake's libfirebreak, not in %s's LIB_SOURCES"
              % (f, sys.argv[1]))
    for f in extra:
        print("FAIL: src/%s is in %s's LIB_SOURCES, not in CMake's libfirebreak"
              % (f, sys.argv[1]))
    if missing or extra:
        return 1
    print("ok: setup.py and CMake build the same %d libfirebreak sources" % len(pip))
    return 0


if __name__ == "__main__":
    sys.exit(main())
