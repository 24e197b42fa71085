#!/bin/bash
# alternated old/new compiles of the policy loop program alone
for pair in 1 2; do
 for cfg in "ngram heuristic" "ngram goodput" "layer-skip heuristic" "layer-skip goodput"; do
  set -- $cfg
  for tree in /tmp/p21/old /work/main; do
   name=$([ $tree = /work/main ] && echo new || echo old)
   echo -n "pair $pair $name: "
   (cd $tree && PYTHONPATH=. /work/main/.venv-test/bin/python benchmarks/bench_loop_compile.py --drafter $1 --policy $2 --k 4 --repeats 3 2>&1 | grep -v Warn | tail -1)
  done
 done
done
