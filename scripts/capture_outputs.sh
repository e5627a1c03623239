#!/usr/bin/env bash
# Used to check that a refactor leaves outputs byte-identical: capture before and after, then diff -r
# (the scratch folders' names and the timings are masked, so two runs of one tree give the same files).
# capture.sh OUTDIR : run a matrix of commands from the current dir's popliner, store outputs
set -u
final=$1; out=$(mktemp -d /tmp/capwork.XXXXXX); export POPLINER_CACHE_DIR=$(mktemp -d) PYTHONPATH=$PWD
F=fixtures/profiles
i=0
run() { # name, args...
  local name=$1; shift
  popliner "$@" > "$out/$name.stdout" 2> "$out/$name.stderr"; echo "rc=$?" >> "$out/$name.stderr"
}
for prof in tiny-training.json bert-tiny-training.json bert-tiny-inference.json bert-base-training.json.gz; do
 for hp in first last wrap; do
  for opts in "" "--recompute every-layer --optimizer-state off-chip" "--recompute auto" "--recompute pipeline"; do
   i=$((i+1)); d="$out/f$i"; mkdir -p "$d"
   echo "$prof $hp $opts" > "$d/cmd"
   run "f$i/solve" $F/$prof --solve --num-ipus 4 --head-placement $hp $opts --config-out $d/p.yaml --ipu-config-out $d/ipu.json --report $d/r.html
   run "f$i/xlsx" $F/$prof --solve --num-ipus 4 --head-placement $hp $opts -o $d/r.xlsx
   if [ -f $d/p.yaml ]; then
     run "f$i/check" check $d/p.yaml --profile $F/$prof
     run "f$i/sim" simulate $d/p.yaml --profile $F/$prof
   fi
   run "f$i/tables" $F/$prof --head-placement $hp $opts --layer-breakdown --operation-breakdown --memory-totals
  done
 done
done
run "min" $F/bert-base-training.json.gz --solve --num-ipus 8 --min-ipus
run "exit3" $F/bert-base-training.json.gz --solve --num-ipus 2
run "exact" $F/bert-tiny-training.json --solve --num-ipus 3 --exact-ipus --solver greedy
# strip volatile bits: html report timestamps? xlsx zip dates
for f in $(find "$out" -name '*.xlsx'); do (mkdir -p "$f.d" && cd "$f.d" && unzip -q -o "$f" && rm -f docProps/core.xml); rm "$f"; done

# mask what differs between two runs of the same tree: the scratch folders' names and the timings
find "$out" -type f ! -name '*.gz' -print0 | xargs -0 -r sed -i -E \
  -e "s#$out#CAPWORK#g" -e "s#$POPLINER_CACHE_DIR#CACHEDIR#g" \
  -e 's/ in [0-9]+(\.[0-9]+)? s\b/ in N s/g' -e 's/"wall_seconds": [0-9.eE+-]+/"wall_seconds": N/g'
rm -rf "$final"; mv "$out" "$final"
