# The scaling study's figure (bench/scaling/run.sh passes data= and out=): per model, the speedup from
# 1 to 2 ranks of each implementation (the ceiling: 2 ranks training alone, no communication), and
# each implementation's 2-rank throughput relative to PyTorch's Python DDP.
set terminal pngcairo size 1200,520 font "sans,10"
set output out
set style data histograms
set style histogram clustered gap 1
set style fill solid 0.85 border -1
set boxwidth 0.9
set key outside bottom center horizontal noautotitle
set grid ytics
set yrange [0:*]
set multiplot layout 1,2 title "cohort scaling study: 1 vs 2 ranks on CPU (synthetic CIFAR-shaped data)"
set title "speedup, 1 -> 2 ranks"
plot data using 2:xtic(1) title "cohort DDP", '' using 4 title "cohort ZeRO-1", \
     '' using 6 title "cohort ZeRO-2", '' using 8 title "PyTorch 1.13 DDP (Python)", \
     '' using 10 title "ceiling (no communication)"
set title "2-rank samples/s relative to PyTorch DDP"
plot data using 3:xtic(1) title "cohort DDP", '' using 5 title "cohort ZeRO-1", \
     '' using 7 title "cohort ZeRO-2", '' using 9 title "PyTorch 1.13 DDP (Python)", \
     '' using 11 title "ceiling (no communication)"
unset multiplot
