cd / && exec $1 exec /var/tmp/gpurun-reads/img.sqsh sh -c 'cd / && xargs cat | wc -c' < /var/tmp/gpurun-reads/list
