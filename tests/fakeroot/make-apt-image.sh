#!/bin/bash
# A Debian root file system made of this machine's own apt and dpkg (no network), a small
# package that needs --fakeroot's faked chown and id changes, and an apt repository holding it,
# for tests of package installs (tests/fakeroot_install.rs; reusable in tests/slurm/).
# Needs root: the package's file is owned by uid 1234.
#
#   make-apt-image.sh OUTDIR PORT
#
# OUTDIR/rootfs   the root file system (make an image of it: mksquashfs OUTDIR/rootfs IMG);
#                 its apt reads the repository at http://127.0.0.1:PORT/
# OUTDIR/repo     the repository (Packages and the .deb), to serve at that address, e.g.
#                 python3 -m http.server PORT --bind 127.0.0.1 --directory OUTDIR/repo
#
# The package, gpurun-fakeroot-test, ships /usr/share/gpurun-fakeroot-test/owned owned by
# 1234:1234; its postinst chowns it to 4321:4321, adds group and user gpurunpkg (4321) and
# replaces /etc/localtime by a rename, as tzdata's does.
set -euo pipefail

out=${1:?usage: make-apt-image.sh OUTDIR PORT}
port=${2:?usage: make-apt-image.sh OUTDIR PORT}
root=$out/rootfs
pkg=gpurun-fakeroot-test
[ "$(id -u)" = 0 ] || { echo "make-apt-image.sh: run as root (the package's file is owned by 1234)" >&2; exit 2; }
rm -rf "$root" "$out/repo" "$out/pkg"
mkdir -p "$root"/usr/{bin,sbin,lib,lib64} "$out/repo"
for d in bin sbin lib lib64; do ln -s "usr/$d" "$root/$d"; done

# What apt, dpkg and a package's maintainer scripts run (dpkg checks for sh, rm, tar, diff,
# dpkg-deb, ldconfig and start-stop-daemon), as their packages ship them, without docs.
packages="apt dpkg dash coreutils tar diffutils passwd libc-bin sed grep findutils gpgv
          debianutils base-files"
copy() { # PATH: the file or symlink at the same place in the root
    mkdir -p "$(dirname "$root$1")"
    cp -P --preserve=mode "$1" "$root$1"
}
elves=()
for p in $packages; do
    while read -r f; do
        case $f in /usr/share/doc/*|/usr/share/man/*|/usr/share/locale/*|/usr/share/info/*) continue ;; esac
        [ -d "$f" ] && [ ! -L "$f" ] && continue
        [ -e "$f" ] || [ -L "$f" ] || continue
        copy "$f"
        [ -f "$f" ] && [ ! -L "$f" ] && [ "$(head -c4 "$f" | tr -d '\0')" = $'\x7fELF' ] && elves+=("$f")
    done < <(dpkg -L "$p")
done
ln -sf dash "$root/usr/bin/sh"
# The libraries they load, each under the name the loader asks for.
for lib in $(ldd "${elves[@]}" 2>/dev/null | awk '$2 == "=>" && $3 ~ /^\// {print $3} $1 ~ /^\// && NF == 2 {print $1}' | sort -u); do
    mkdir -p "$(dirname "$root$lib")"
    cp -L --preserve=mode "$lib" "$root$lib"
done

# A Debian system's users, apt's _apt among them (apt drops to it unless told otherwise).
cat > "$root/etc/passwd" <<'EOF'
root:x:0:0:root:/root:/bin/sh
daemon:x:1:1:daemon:/usr/sbin:/usr/sbin/nologin
bin:x:2:2:bin:/bin:/usr/sbin/nologin
_apt:x:42:65534::/nonexistent:/usr/sbin/nologin
nobody:x:65534:65534:nobody:/nonexistent:/usr/sbin/nologin
EOF
cat > "$root/etc/group" <<'EOF'
root:x:0:
daemon:x:1:
bin:x:2:
shadow:x:42:
users:x:100:
nogroup:x:65534:
EOF
sed 's/:.*/:*:19000:0:99999:7:::/' "$root/etc/passwd" > "$root/etc/shadow"
sed 's/:.*/:*::/' "$root/etc/group" > "$root/etc/gshadow"
chmod 640 "$root/etc/shadow" "$root/etc/gshadow"
cp /etc/login.defs "$root/etc/login.defs"
printf 'passwd: files\ngroup: files\nshadow: files\nhosts: files\n' > "$root/etc/nsswitch.conf"

mkdir -p "$root"/{root,home,tmp,proc,sys,dev,run} "$root"/var/{log/apt,cache/apt/archives/partial} \
    "$root"/var/lib/{apt/lists/partial,dpkg/info,dpkg/updates,dpkg/triggers,dpkg/alternatives} \
    "$root"/etc/apt/{apt.conf.d,preferences.d,sources.list.d}
chmod 1777 "$root/tmp"
: > "$root/var/lib/dpkg/status"
: > "$root/var/lib/dpkg/available"
echo "deb [trusted=yes] http://127.0.0.1:$port/ ./" > "$root/etc/apt/sources.list"
# one request per connection: a test's small server closes each
printf 'Acquire::http::Pipeline-Depth "0";\nAcquire::Languages "none";\n' \
    > "$root/etc/apt/apt.conf.d/50gpurun-test"

# The package.
src=$out/pkg
mkdir -p "$src/DEBIAN" "$src/usr/share/$pkg"
echo "owned by 1234" > "$src/usr/share/$pkg/owned"
chown 1234:1234 "$src/usr/share/$pkg/owned"
cat > "$src/DEBIAN/control" <<EOF
Package: $pkg
Version: 1.0
Architecture: all
Maintainer: gpurun tests <gpurun-tests@localhost>
Description: a file owned by 1234, and a postinst that chowns it and adds a user
EOF
cat > "$src/DEBIAN/postinst" <<EOF
#!/bin/sh
set -e
if [ "\$1" = configure ]; then
    chown 4321:4321 /usr/share/$pkg/owned
    groupadd -g 4321 gpurunpkg
    useradd -u 4321 -g gpurunpkg -M -d /nonexistent -s /bin/sh gpurunpkg
    # as tzdata's postinst: a new /etc/localtime renamed over the one there
    cp /etc/localtime /etc/localtime.dpkg-new 2>/dev/null || : > /etc/localtime.dpkg-new
    mv /etc/localtime.dpkg-new /etc/localtime
fi
EOF
chmod 755 "$src/DEBIAN/postinst"
deb=$out/repo/${pkg}_1.0_all.deb
dpkg-deb -Zgzip --build "$src" "$deb" >/dev/null
{
    dpkg-deb -f "$deb"
    echo "Filename: ./$(basename "$deb")"
    echo "Size: $(stat -c %s "$deb")"
    echo "SHA256: $(sha256sum "$deb" | cut -d' ' -f1)"
    echo
} > "$out/repo/Packages"
