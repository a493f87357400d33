# par.sh N CMD...: start N copies at once, wait for all
N=$1; shift
for i in $(seq $N); do "$@" & done; wait
