#!/usr/bin/env bash
# Checks that each binary given is statically linked and starts: `file` must say "statically
# linked" (or "static-pie linked"), `ldd` must find no shared library, and `<bin> --help` must exit 0,
# also inside an empty chroot (no /lib, no /etc) when run as root.
# Used by `make static` and by the Dockerfile's build stage.
set -euo pipefail
[[ $# -gt 0 ]] || { echo "usage: $0 BINARY..." >&2; exit 2; }
status=0
for bin in "$@"; do
  if [[ ! -x "$bin" ]]; then
    echo "FAIL $bin: missing or not executable"; status=1; continue
  fi
  desc=$(file -L "$bin")
  if ! grep -qE 'statically linked|static-pie linked' <<<"$desc"; then
    echo "FAIL $bin: file says: $desc"; status=1; continue
  fi
  # ldd exits non-zero on a static binary ("not a dynamic executable"); any "=>" line is a shared library.
  if ldd "$bin" 2>&1 | grep -q '=>'; then
    echo "FAIL $bin: ldd lists shared libraries:"; ldd "$bin" || true; status=1; continue
  fi
  if ! "$bin" --help >/dev/null 2>&1; then
    echo "FAIL $bin: '$bin --help' failed"; "$bin" --help || true; status=1; continue
  fi
  if [[ $(id -u) == 0 ]] && command -v chroot >/dev/null; then
    root=$(mktemp -d)
    cp "$bin" "$root/bin"
    if ! chroot "$root" /bin --help >/dev/null 2>&1; then
      echo "FAIL $bin: '--help' failed in an empty chroot"; rm -rf "$root"; status=1; continue
    fi
    rm -rf "$root"
  fi
  echo "ok   $bin: $(du -h "$bin" | cut -f1), ${desc#*: }"
done
exit $status
