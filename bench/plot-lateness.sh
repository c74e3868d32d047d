#!/usr/bin/env bash
# Draws bench/results/lateness.png from the samples `dueq-bench --scenario
# lateness --lateness-data bench/results/lateness.dat` wrote. Needs gnuplot
# (apt-get install gnuplot-nox).
set -euo pipefail
data=${1:-bench/results/lateness.dat}
png=${2:-bench/results/lateness.png}
gnuplot <<GNUPLOT
set terminal pngcairo size 900,500 font ",11"
set output "$png"
set title "dueq: start time minus due time, 20,000 timers over 10 s (cumulative)"
set xlabel "lateness (ms)"
set ylabel "fraction of jobs started"
set grid
set key bottom right
set xrange [0:*]
set yrange [0:1]
plot "$data" using 1:2 with lines lw 2 title "dueq lateness"
GNUPLOT
echo "wrote $png"
