# Sourced by the scripts that build test images from this machine's own files (no network,
# no root): mpi-image.sh, torch-image.sh. Images are laid out merged-/usr like Debian, with
# busybox as /usr/bin/sh.

ML=/usr/lib/x86_64-linux-gnu

# A root file system skeleton in R.
rootfs_init() {  # R
    mkdir -p "$1"/usr/{bin,lib64,lib/x86_64-linux-gnu} "$1"/{etc,tmp,proc,sys,dev,root,home}
    ln -s usr/bin "$1/bin"; ln -s usr/lib "$1/lib"; ln -s usr/lib64 "$1/lib64"
    cp /bin/busybox "$1/usr/bin/"; ln -s busybox "$1/usr/bin/sh"
    echo 'root:x:0:0:root:/root:/bin/sh' > "$1/etc/passwd"; echo 'root:x:0:' > "$1/etc/group"
}

# Every shared library OBJ... need (ldd closure), under the name the loader asks for (the
# soname ldd prints) in the multiarch directory; the loader itself where PT_INTERP points.
# Prints the real path of each library.
copy_libs() {  # R OBJ...
    local r=$1 lib; shift
    # ldd fails for any non-dynamic file given; its list for the rest is still right
    { ldd "$@" 2>/dev/null || true; } | awk '$2 == "=>" && $3 ~ /^\// {print $3}' | sort -u |
    while read -r lib; do
        [ -e "$r$ML/$(basename "$lib")" ] || cp -L "$lib" "$r$ML/"
        realpath "$lib"
    done
    [ -e "$r/usr/lib64/ld-linux-x86-64.so.2" ] || cp -L /lib64/ld-linux-x86-64.so.2 "$r/usr/lib64/"
}

# R as a squashfs file OUT, written beside it and renamed into place. zstd level 3: the
# default level 15 took 150 s for the 630 MB PyTorch tree on 2 cores, level 3 2.5 s (10% larger).
squash() {  # R OUT
    mksquashfs "$1" "$2.tmp" -noappend -quiet -no-progress -all-root -comp zstd \
        -Xcompression-level 3 >/dev/null
    mv "$2.tmp" "$2"
}
