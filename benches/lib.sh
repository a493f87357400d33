# Shared by the benchmark scripts (sourced, not run).

# Drop a tree's file data from the page cache, as a fresh node would have it (root: any file).
evict_tree() {
    python3 - "$1" <<'PY'
import os, sys
for d, _, names in os.walk(sys.argv[1]):
    for f in names:
        try:
            fd = os.open(os.path.join(d, f), os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK)
        except OSError:
            continue
        try:
            os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED)
        finally:
            os.close(fd)
PY
}
