#!/usr/bin/env bash
# Every benchmark at its three sizes (docs/performance.md), one after the other, on one
# database; the JSON lines go to bench/results/<label>-<database>.jsonl, the tables to a .log.
#   bench/run_all.sh sqlite before          # or: postgresql after;  SIZES=target: target size only
# The scripts run on PYTHON (the dev venv); the daemon under test on .bench-venv/ (made with
# `pip install -e .` on first use, see bench/README.md), or on ECRON_PYTHON when set.
set -euo pipefail
cd "$(dirname "$0")/.."
database=${1:-sqlite}
label=${2:-$(git rev-parse --short HEAD)}
python=${PYTHON:-.venv/bin/python}
out=bench/results/$label-$database
mkdir -p bench/results
if [[ ${SIZES:-all} == target ]]; then
  triggers="2000"; bursts="10000"; polls="10000"; runs="10000"; lives="100"
  starts="0,1000,10000"; overloads="10"
else
  triggers="200 1000 2000"; bursts="1000 5000 10000"; polls="1000 5000 10000"
  runs="1000 5000 10000"; lives="10 50 100"; starts="0,1000,10000"; overloads="5 10 20"
fi
ecron=(${ECRON_PYTHON:+--ecron-python "$ECRON_PYTHON"})
run() { "$python" -m "bench.$1" --database "$database" ${ecron[@]+"${ecron[@]}"} "${@:2}" | tee -a "$out.log"; }
for n in $triggers; do run triggers --tasks "$n"; done
for n in $bursts; do run burst --tasks "$n"; done
for n in $polls; do run polls --executions "$n"; done
for n in $runs; do run runs --runs "$n"; done
for n in $lives; do run lifecycle --executions "$n"; done
run startup --tasks "$starts" --runs 3
for n in $overloads; do run overload --workers "$n" --levels 1,2,5,10; done
run pools --tasks 2000 --pools 20 --max-running 50
grep -h '^{"bench": ' "$out.log" >> "$out.jsonl"
