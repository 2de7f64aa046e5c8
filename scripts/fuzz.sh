#!/usr/bin/env bash
# make fuzz: coverage-guided fuzzing of rflux's parsers with libFuzzer on the stable toolchain
# (issue 14). The targets live in fuzz/ (its own workspace, excluded from the main one); they
# are built with the sanitizer-coverage instrumentation passed as stable rustc flags into
# $CARGO_TARGET_DIR/fuzz, then each selected target runs FUZZ_SECONDS, one at a time, on its
# committed seeds (fuzz/seeds/<target>) and a working corpus ($CARGO_TARGET_DIR/fuzz-corpus/<target>).
# Crashers, timeouts and OOMs go to fuzz/artifacts/<target>/; the exit status is non-zero when
# any target found one. A crasher saved there is replayed by the default suite
# (e2e/tests/fuzz_seeds.rs), so it stays a regression test.
#
#   FUZZ_SECONDS=600   run time per target (0: only build)
#   FUZZ_TARGETS="yaml untar"   targets to run (default: all)
#   FUZZ_NICE=10       niceness of the fuzzing processes
set -euo pipefail
cd "$(dirname "$0")/.."

ALL_TARGETS="yaml kustomize_build git_pktline git_protocol git_pack untar substitute sops oci"
FUZZ_SECONDS=${FUZZ_SECONDS:-600}
FUZZ_TARGETS=${FUZZ_TARGETS:-$ALL_TARGETS}
FUZZ_NICE=${FUZZ_NICE:-10}
export CARGO_TARGET_DIR=${CARGO_TARGET_DIR:-$HOME/.cache/rflux/target}
CARGO=${CARGO:-cargo}

for t in $FUZZ_TARGETS; do
    case " $ALL_TARGETS " in *" $t "*) ;; *) echo "unknown fuzz target '$t' (known: $ALL_TARGETS)" >&2; exit 2 ;; esac
done

# libfuzzer-sys compiles libFuzzer (C++) with the cc crate: it needs a C++ compiler.
if ! command -v c++ >/dev/null 2>&1 && ! command -v g++ >/dev/null 2>&1 && ! command -v clang++ >/dev/null 2>&1; then
    echo "fuzz: installing a C++ compiler (g++) for libFuzzer" >&2
    SUDO=""; [ "$(id -u)" -eq 0 ] || SUDO="sudo"
    $SUDO apt-get update -qq && DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq g++ >/dev/null
fi

# The instrumentation cargo-fuzz passes, on stable: no nightly flag, no RUSTC_BOOTSTRAP.
# --target makes RUSTFLAGS skip build scripts and proc macros, as cargo-fuzz does.
HOST=$(rustc -vV | sed -n 's/^host: //p')
export RUSTFLAGS="-Cpasses=sancov-module -Cllvm-args=-sanitizer-coverage-level=4 \
-Cllvm-args=-sanitizer-coverage-inline-8bit-counters -Cllvm-args=-sanitizer-coverage-pc-table \
-Cllvm-args=-sanitizer-coverage-trace-compares -Cllvm-args=-sanitizer-coverage-stack-depth \
--cfg fuzzing -Cdebug-assertions -Coverflow-checks"
unset RUSTC_BOOTSTRAP
BIN_ARGS=()
for t in $FUZZ_TARGETS; do BIN_ARGS+=(--bin "$t"); done
echo "fuzz: building ${FUZZ_TARGETS} ($HOST, $(rustc --version))" >&2
nice -n "$FUZZ_NICE" $CARGO build --release --manifest-path fuzz/Cargo.toml --features libfuzzer \
    --target "$HOST" --target-dir "$CARGO_TARGET_DIR/fuzz" "${BIN_ARGS[@]}"
BIN_DIR=$CARGO_TARGET_DIR/fuzz/$HOST/release
if [ "$FUZZ_SECONDS" -le 0 ]; then
    echo "fuzz: FUZZ_SECONDS=$FUZZ_SECONDS: built only" >&2
    exit 0
fi

# kustomize_build and untar make a temporary directory per input: on tmpfs when there is one.
if [ -z "${TMPDIR:-}" ] && [ -d /dev/shm ] && [ -w /dev/shm ]; then export TMPDIR=/dev/shm; fi
LOG_DIR=$CARGO_TARGET_DIR/fuzz-logs
mkdir -p "$LOG_DIR"
failed=0
summary=()
for t in $FUZZ_TARGETS; do
    corpus=$CARGO_TARGET_DIR/fuzz-corpus/$t
    artifacts=fuzz/artifacts/$t
    mkdir -p "$corpus" "$artifacts" "fuzz/seeds/$t"
    before=$(find "$artifacts" -type f | wc -l)
    stamp=$(mktemp); touch "$stamp"
    log=$LOG_DIR/$t.log
    echo "fuzz: $t: ${FUZZ_SECONDS}s" >&2
    # Fork mode with the crash/timeout/OOM ignores: a finding is saved to $artifacts and the
    # fuzzing goes on for the whole FUZZ_SECONDS instead of stopping at the first crash.
    started=$SECONDS
    nice -n "$FUZZ_NICE" "$BIN_DIR/$t" -fork=1 -ignore_crashes=1 -ignore_timeouts=1 -ignore_ooms=1 \
        -max_total_time="$FUZZ_SECONDS" -rss_limit_mb=2048 -timeout=10 \
        -artifact_prefix="$artifacts/" "$corpus" "fuzz/seeds/$t" >"$log" 2>&1 || true
    secs=$((SECONDS - started))
    # The fork-mode status line: #<execs>: cov: C ft: F corp: N exec/s: E oom/timeout/crash: a/b/c time: Ts
    line=$(grep -a -E '^#[0-9]+: cov: ' "$log" | tail -1 || true)
    field() { sed -n "s#.* $1 \([0-9/]*\).*#\1#p" <<<"$line"; }
    execs=$(sed -n 's/^#\([0-9]*\):.*/\1/p' <<<"$line"); cov=$(field cov:); ft=$(field ft:)
    otc=$(field oom/timeout/crash:)
    after=$(find "$artifacts" -type f | wc -l)
    found=$((after - before))
    rate=$(( ${execs:-0} / (secs > 0 ? secs : 1) ))
    corp=$(find "$corpus" -type f | wc -l)
    row=$(printf '%-16s execs=%-10s exec/s=%-7s cov=%-6s ft=%-6s corpus=%-6s oom/timeout/crash=%-8s new-artifacts=%s' \
        "$t" "${execs:-0}" "$rate" "${cov:-?}" "${ft:-?}" "$corp" "${otc:-?}" "$found")
    echo "fuzz: $row" >&2
    summary+=("$row")
    if [ "$found" -gt 0 ] || [ -n "$(tr -d '0/' <<<"${otc:-}")" ]; then
        failed=1
        find "$artifacts" -type f -newer "$stamp" | sort | sed 's/^/    new: /' >&2 || true
    fi
    rm -f "$stamp"
done
echo "fuzz summary (${FUZZ_SECONDS}s per target; logs in $LOG_DIR):"
printf '  %s\n' "${summary[@]}"
exit $failed
