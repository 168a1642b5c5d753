#!/usr/bin/env bash
# Builds `spindle` as one statically linked x86-64 binary for a machine that has no Rust (the
# same architecture, any Linux), stripped, with the workspace's loop alignment kept; with
# --tests, the workspace's test binaries as well. Copy OUT_DIR over and run `OUT_DIR/spindle lab`
# there; each test binary runs on its own (`OUT_DIR/tests/sync-rings`, say).
#
#   scripts/static-lab.sh [--tests] [OUT_DIR]     # OUT_DIR defaults to target/static-lab
#
# Two things a plain `RUSTFLAGS="-C target-feature=+crt-static" cargo build` gets wrong:
# - A RUSTFLAGS variable replaces `.cargo/config.toml`'s `-C llvm-args=-align-loops=64`, and
#   without it a few-cycle loop (a signal, a push and a pop) that happens to cross a 64-byte
#   boundary can flip its claim (the lab then names the build among the run's anomalies).
# - snmalloc-sys asks for `-lgcc_s`, which exists only as a shared library: a static-pie link
#   fails with "unable to find library -lgcc_s". The unwinder it stands for comes from
#   libgcc_eh in a static link, so an empty libgcc_s.a in a directory of this build's own
#   satisfies the request.
set -euo pipefail
cd "$(dirname "$0")/.."
tests=0
if [ "${1:-}" = "--tests" ]; then
  tests=1
  shift
fi
out=${1:-target/static-lab}
target=x86_64-unknown-linux-gnu
dir=target/static
mkdir -p "$dir/empty-gcc_s" "$out"
[ -f "$dir/empty-gcc_s/libgcc_s.a" ] || ar rc "$dir/empty-gcc_s/libgcc_s.a"
# CARGO_ENCODED_RUSTFLAGS (flags separated by 0x1f) so that a path with spaces stays one flag.
unset RUSTFLAGS
CARGO_ENCODED_RUSTFLAGS=$(printf -- '-C\x1ftarget-feature=+crt-static\x1f-C\x1fllvm-args=-align-loops=64\x1f-L\x1fnative=%s' "$PWD/$dir/empty-gcc_s")
export CARGO_ENCODED_RUSTFLAGS
cargo build --release --quiet --target "$target" --target-dir "$dir"
strip -o "$out/spindle" "$dir/$target/release/spindle"
echo "$out/spindle"
if [ "$tests" = 1 ]; then
  mkdir -p "$out/tests"
  # Each test target's newest executable, named crate-test (sync-rings, alloc-stress, …).
  # Compiler messages go to stderr as usual; stdout carries only cargo's JSON.
  cargo test --release --workspace --no-run --target "$target" --target-dir "$dir" \
    --message-format=json-render-diagnostics |
    python3 -c '
import json, os, sys
root = os.getcwd()
for line in sys.stdin:
    m = json.loads(line)
    if m.get("reason") != "compiler-artifact" or not m.get("executable"):
        continue
    if not m["profile"].get("test"):
        continue
    crate_dir = os.path.dirname(m["manifest_path"])
    crate = "spindle" if crate_dir == root else os.path.basename(crate_dir)
    kind = m["target"]["kind"][0]
    # The unit tests of a library (whatever its crate types: lib, rlib, cdylib) are "unit".
    test = {"test": m["target"]["name"], "bin": "bin"}.get(kind, "unit")
    print(f"{crate}-{test}", m["executable"])
' | while read -r name exe; do
      strip -o "$out/tests/$name" "$exe"
      echo "$out/tests/$name"
    done
fi
