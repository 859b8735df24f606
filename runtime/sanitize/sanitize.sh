#!/bin/sh
# sanitize.sh: `make sanitize` (docs/c-abi.md section 9). Builds samples/xor.tel's library (its
# glue and the runtime; with --distributed) with AddressSanitizer + UBSan and runs xor_driver.c
# through it (train, save, load, broken files, misuse, the all-reduce hook, two threads saving to
# one path), every C test of the runtime
# and the C-entry fuzzer; builds it with ThreadSanitizer and runs the driver and the thread
# pool's and atomic saves' tests; builds it for x86-64-v3 without sanitizers and runs the driver
# under valgrind where valgrind exists. Stops at the first failure.
#
# Usage: sanitize.sh BIN OUT (BIN: the virtual environment's bin; OUT: a scratch directory,
# emptied first). $CC picks the C compiler (default cc).
set -eu

BIN=$1
OUT=$2
CC_BASE=${CC:-cc}
ROOT=$(pwd)
ASAN="-fsanitize=address,undefined -fno-sanitize-recover=undefined -fno-omit-frame-pointer -g"
TSAN="-fsanitize=thread -g"

rm -rf "$OUT"
mkdir -p "$OUT"
OUT=$(cd "$OUT" && pwd)
# Runtime objects are cached here, not in the user's cache: the wrappers' flags are not in the
# cache key, only their paths.
export DLVM_CACHE_DIR="$OUT/cache"
export ASAN_OPTIONS=detect_leaks=1:abort_on_error=0
export UBSAN_OPTIONS=print_stacktrace=1:halt_on_error=1
export TSAN_OPTIONS=halt_on_error=1
export DLRT_NUM_THREADS=3

step() { printf '== %s\n' "$*"; }

# $1: name; $2: flags. A compiler command that adds the flags (telc takes $CC as one word).
wrapper() {
    printf '#!/bin/sh\nexec %s %s "$@"\n' "$CC_BASE" "$2" >"$OUT/$1"
    chmod +x "$OUT/$1"
}

# $1: kind (a directory of OUT); $2: compiler; $3...: telc options. The library and the driver.
build() {
    kind=$1 cc=$2
    shift 2
    mkdir -p "$OUT/$kind/files"
    step "$kind: build samples/xor.tel and the driver"
    CC=$cc "$BIN/telc" build samples/xor.tel -o "$OUT/$kind/xor.so" --no-cache "$@" >/dev/null 2>&1 ||
        CC=$cc "$BIN/telc" build samples/xor.tel -o "$OUT/$kind/xor.so" --no-cache "$@"
    $cc -std=c11 -O1 -Wall -Wextra -Werror -pthread -I"$OUT/$kind" runtime/sanitize/xor_driver.c \
        -o "$OUT/$kind/xor_driver" "$OUT/$kind/xor.so" -Wl,-rpath,"$OUT/$kind"
}

# $1: compiler; $2...: runtime/tests/NAME.c to build against the runtime's objects and run.
c_tests() {
    cc=$1
    shift
    objects=$("$BIN/python" -c 'import sys; from dlvm.runtime import build_runtime
print(" ".join(map(str, build_runtime(sys.argv[1]))))' "$cc")
    for test in "$@"; do
        step "$(basename "$cc"): runtime/tests/$test.c"
        mkdir -p "$OUT/tests/$test"
        # shellcheck disable=SC2086 # $objects is a list of paths without spaces
        $cc -std=c11 -Wall -Wextra -pthread -I"$ROOT/runtime/include" "$ROOT/runtime/tests/$test.c" \
            $objects -o "$OUT/tests/$test/$test" -ldl
        (cd "$OUT/tests/$test" && TMPDIR="$OUT/tests/$test" run "./$test")
    done
}

# Runs a program; under ThreadSanitizer, again without address randomisation when its shadow
# memory cannot be mapped (older TSan runtimes on kernels with high ASLR entropy).
run() {
    if ! "$@" 2>"$OUT/stderr"; then
        if grep -q "unexpected memory mapping" "$OUT/stderr" && command -v setarch >/dev/null; then
            setarch "$(uname -m)" -R "$@"
        else
            cat "$OUT/stderr" >&2
            return 1
        fi
    else
        cat "$OUT/stderr" >&2
    fi
}

wrapper cc-asan "$ASAN"
wrapper cc-tsan "$TSAN"

build asan "$OUT/cc-asan" --distributed
step "asan: xor_driver"
run "$OUT/asan/xor_driver" "$OUT/asan/files"
c_tests "$OUT/cc-asan" $(cd runtime/tests && ls test_*.c | sed 's/\.c$//')
step "asan: the C-entry fuzzer (tests/unit/test_fuzz_c_entries.py) on an instrumented library"
CC=$CC_BASE DLVM_FUZZ_ASAN=1 "$BIN/pytest" -q -p no:cacheprovider tests/unit/test_fuzz_c_entries.py

build tsan "$OUT/cc-tsan" --distributed
step "tsan: xor_driver"
run "$OUT/tsan/xor_driver" "$OUT/tsan/files"
c_tests "$OUT/cc-tsan" test_threadpool test_safetensors_atomic

if command -v valgrind >/dev/null && [ "$(uname -m)" = x86_64 ]; then
    build valgrind "$CC_BASE" --cpu x86-64-v3 --distributed
    step "valgrind: xor_driver"
    DLRT_NUM_THREADS=2 valgrind --quiet --error-exitcode=1 --leak-check=full \
        --errors-for-leak-kinds=definite "$OUT/valgrind/xor_driver" "$OUT/valgrind/files"
else
    step "valgrind: skipped (no valgrind, or not x86-64)"
fi
step "sanitize: all passed"
