# spin.sh POLICY SECONDS: two busy loops (chrt -i 0 for idle, else normal) for SECONDS
for i in 1 2; do
  if [ "$1" = idle ]; then chrt -i 0 timeout $2 sh -c 'while :; do :; done' & else timeout $2 sh -c 'while :; do :; done' & fi
done
wait
