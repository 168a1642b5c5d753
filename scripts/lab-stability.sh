#!/usr/bin/env bash
# Are the lab's verdicts stable on this machine? Runs the quick lab twice back to back, then once
# beside a CPU hog (one busy process per CPU), and compares the verdicts with `spindle lab
# --flips`: it exits 1 if a guarantee held in one run and was violated in another, and lists
# the claims left undecided although their median lay 5% or more from the bound.
#
#   scripts/lab-stability.sh [OUT_DIR]        # about 10 minutes; OUT_DIR defaults to target/stability
#
# Run it on an otherwise idle machine: the two clean runs must not see other processes' load
# (the lab discards trials measured under it, which leaves claims undecided). Under the hog
# every window is loaded, so that run's trials are discarded and its claims stay undecided: it
# cannot flip a verdict, and its report says why.
set -euo pipefail
cd "$(dirname "$0")/.."
out=${1:-target/stability}
mkdir -p "$out"
cargo build --release --quiet
bin=target/release/spindle

for run in 1 2; do
  echo "quick run $run → $out/run$run"
  "$bin" lab --quiet --out "$out/run$run" > "$out/run$run.txt"
done

hogs=()
stop_hogs() { [ ${#hogs[@]} -eq 0 ] || kill "${hogs[@]}" 2>/dev/null || true; }
trap stop_hogs EXIT
for _ in $(seq "$(nproc)"); do
  sh -c 'while :; do :; done' &
  hogs+=($!)
done
echo "quick run beside $(nproc) CPU hog(s) → $out/hog"
"$bin" lab --quiet --out "$out/hog" > "$out/hog.txt"
stop_hogs
hogs=()

echo
echo "== the two clean runs"
status=0
"$bin" lab --flips "$out/run1/results.json" "$out/run2/results.json" || status=$?
echo
echo "== all three runs"
"$bin" lab --flips "$out/run1/results.json" "$out/run2/results.json" "$out/hog/results.json" || status=$?
exit $status
