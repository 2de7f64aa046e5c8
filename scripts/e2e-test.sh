#!/usr/bin/env bash
# Runs e2e tests against a local control plane + git server, then stops them.
#   scripts/e2e-test.sh                    # cargo test -p rflux-e2e
#   scripts/e2e-test.sh -p rflux-source-controller --test e2e   # any cargo test args
# Needs: go (>= 1.25), git, openssl, ssh, ssh-keygen, sshd (apt-get install -y openssh-server).
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
cd "$root"
cargo build -q -p rflux-e2e --bin rflux-e2e
launcher="$root/target/debug/rflux-e2e"
trap '"$launcher" down' EXIT
"$launcher" build          # cold: ~35 min on 2 cores; warm: seconds
"$launcher" up             # control plane "default" + git server
if [[ $# -eq 0 ]]; then set -- -p rflux-e2e; fi
cargo test "$@"
