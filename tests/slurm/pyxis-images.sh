# Sourced by pyxis-suite.sh: stand-ins for the images pyxis's test suite names, built from this
# machine's own files (no network) into an OCI layout, one builder per kind of image.
#
# Every stand-in is one shared base layer and one small layer of its own. The base is a
# Debian-like root made of this machine's installed Debian packages, whole (less documentation),
# with their dependencies, and registered in the image's dpkg database; apt in it installs from
# a repository inside the image of this machine's packages repacked (file, make, tzdata...), so
# the suite's `apt-get update && apt-get install` lines work offline.

# What the base has: the tools the suite's commands use (findmnt, ipcmk, hostname, perl...).
BASE_PKGS=(bash coreutils dash diffutils findutils grep gzip hostname mawk sed tar util-linux mount
  debianutils libc-bin dpkg apt perl-base procps base-passwd)
# What its apt repository offers: the packages the suite installs, where this machine has them.
REPO_WANT=(file make tzdata install-info emacs-nox openssh-server)
REPO_DIR=/opt/gpurun-stand-in-apt
STANDIN_PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin
# paths of a package left out of images: documentation and translations
EXCLUDE_RE='^/usr/share/(doc|doc-base|man|info|locale|lintian|bash-completion|zsh|bug)(/|$)'

pkg_installed() { dpkg-query -W -f='${db:Status-Status}' "$1" 2>/dev/null | grep -qx installed; }

# The installed packages P... need (Depends, Pre-Depends), with P: of each alternative the
# installed one, a virtual package by its installed provider.
deb_closure() {  # P...
    local -A seen=(); local queue=("$@") p g a pick
    local provides; provides=$(dpkg-query -W -f='${db:Status-Status} ${Package} ${Provides}\n' |
        awk '$1 == "installed" {for (i = 3; i <= NF; i++) {v = $i; sub(/,$/, "", v); print v, $2}}')
    while [ ${#queue[@]} -gt 0 ]; do
        p=${queue[0]}; queue=("${queue[@]:1}")
        [ -z "${seen[$p]:-}" ] || continue
        seen[$p]=1
        while read -r g; do
            pick=""
            for a in ${g//|/ }; do pkg_installed "$a" && { pick=$a; break; }; done
            for a in ${g//|/ }; do
                [ -n "$pick" ] || pick=$(awk -v n="$a" '$1 == n {print $2; exit}' <<<"$provides")
            done
            [ -z "$pick" ] || queue+=("$pick")
        done < <(dpkg-query -W -f='${Pre-Depends},${Depends}\n' "$p" | tr ',' '\n' |
            sed -E 's/\([^)]*\)//g; s/:any//g; s/[[:space:]]//g; /^$/d')
    done
    printf '%s\n' "${!seen[@]}" | sort
}

# The paths of package P as dpkg lists them, less the excluded ones and "/.".
pkg_paths() {  # P
    dpkg-query -L "$1" | grep '^/' | grep -v -E "$EXCLUDE_RE" | grep -vx '/\.'
}

# Copy paths (on stdin) from / into R, keeping R's merged-/usr links (bin -> usr/bin...).
copy_paths() {  # R
    sed 's,^/,,' | tar -C / --no-recursion --ignore-failed-read -cf - -T - 2>/dev/null |
        tar -C "$1" --keep-directory-symlink -xf -
}

# dpkg's info file F (list, postinst...) of package P, by its plain or multiarch name.
pkg_info() {  # P F
    local f
    for f in "/var/lib/dpkg/info/$1.$2" "/var/lib/dpkg/info/$1:$(dpkg --print-architecture).$2"; do
        [ -e "$f" ] && { echo "$f"; return; }
    done
    return 1
}

# /etc/alternatives links of this machine (and the /usr/bin... links to them) whose target R
# has: maintainer scripts make them, so no package lists them.
copy_alternatives() {  # R
    local r=$1 l t
    mkdir -p "$r/etc/alternatives" "$r/var/lib/dpkg/alternatives"
    for l in /etc/alternatives/*; do
        t=$(readlink -f "$l") || continue
        [ -e "$r$t" ] || continue
        cp -P "$l" "$r/etc/alternatives/"
        if [ -e "/var/lib/dpkg/alternatives/${l##*/}" ]; then
            cp "/var/lib/dpkg/alternatives/${l##*/}" "$r/var/lib/dpkg/alternatives/"
        fi
    done
    find /usr/bin /usr/sbin -maxdepth 1 -lname '/etc/alternatives/*' | while read -r l; do
        if [ -e "$r/etc/alternatives/$(basename "$(readlink "$l")")" ]; then cp -P "$l" "$r$l"; fi
    done
}

# The base root in R: BASE_PKGS and their dependencies, whole, registered in its dpkg database
# (status, file lists, conffiles), with the users, alternatives and loader cache their maintainer
# scripts would have made.
base_rootfs() {  # R
    local r=$1 p f pkgs
    mkdir -p "$r"/usr/{bin,sbin,lib,lib64} "$r"/{etc,tmp,proc,sys,dev,root,home,run,mnt,opt,srv} \
        "$r"/usr/local/{bin,sbin,lib,include,share,src} "$r"/var/{tmp,local,opt,mail,spool}
    ln -s usr/bin "$r/bin"; ln -s usr/sbin "$r/sbin"; ln -s usr/lib "$r/lib"; ln -s usr/lib64 "$r/lib64"
    chmod 1777 "$r/tmp" "$r/var/tmp"; chmod 700 "$r/root"
    mapfile -t pkgs < <(deb_closure "${BASE_PKGS[@]}")
    for p in "${pkgs[@]}"; do pkg_paths "$p"; done | copy_paths "$r"
    mkdir -p "$r"/var/lib/dpkg/{info,updates,triggers,alternatives} "$r"/var/lib/apt/lists/partial \
        "$r"/var/cache/apt/archives/partial "$r"/var/log/apt
    touch "$r"/var/lib/dpkg/{available,diversions,statoverride}
    for p in "${pkgs[@]}"; do
        dpkg-query -s "$p"; echo
        for f in list conffiles; do
            if f=$(pkg_info "$p" "$f"); then grep -v -E "$EXCLUDE_RE" "$f" > "$r$f"; fi
        done
    done > "$r/var/lib/dpkg/status"
    cp /usr/share/base-passwd/passwd.master "$r/etc/passwd"
    cp /usr/share/base-passwd/group.master "$r/etc/group"
    printf '/bin/sh\n/usr/bin/sh\n/bin/bash\n/usr/bin/bash\n/bin/dash\n/usr/bin/dash\n' > "$r/etc/shells"
    copy_alternatives "$r"
    ldconfig -r "$r"
}

# Package P as it is installed here, rebuilt as a .deb into directory OUT: its files (less
# documentation), its control fields, conffiles and maintainer scripts.
repack() {  # P OUT
    local p=$1 t f s
    t=$(mktemp -d "${TMPDIR:-/tmp}/gpurun-repack.XXXXXX")
    chmod 755 "$t"; mkdir -p "$t/DEBIAN"
    pkg_paths "$p" | copy_paths "$t"
    dpkg-query -s "$p" | awk '/^[A-Z]/ {skip = ($1 == "Status:" || $1 == "Conffiles:")} !skip' > "$t/DEBIAN/control"
    if f=$(pkg_info "$p" conffiles); then
        while read -r s; do if [ -e "$t$s" ]; then echo "$s"; fi; done < "$f" > "$t/DEBIAN/conffiles"
        [ -s "$t/DEBIAN/conffiles" ] || rm "$t/DEBIAN/conffiles"
    fi
    for s in preinst postinst prerm postrm config templates triggers shlibs; do
        if f=$(pkg_info "$p" "$s"); then cp "$f" "$t/DEBIAN/$s"; fi
    done
    dpkg-deb --root-owner-group -Zgzip -b "$t" "$2/$p.deb" >/dev/null
    rm -rf "$t"
}

# A flat apt repository in R$REPO_DIR of the REPO_WANT packages this machine has, with what they
# need that the base lacks; the image's sources.list names only it. Prints the packages.
apt_repo() {  # R
    local r=$1 d=$1$REPO_DIR p deb want=()
    mkdir -p "$d"
    for p in "${REPO_WANT[@]}"; do if pkg_installed "$p"; then want+=("$p"); fi; done
    for p in $(comm -23 <(deb_closure "${want[@]}") <(deb_closure "${BASE_PKGS[@]}")); do
        repack "$p" "$d"
    done
    for deb in "$d"/*.deb; do
        dpkg-deb -f "$deb"
        echo "Filename: ./${deb##*/}"
        echo "Size: $(stat -c %s "$deb")"
        echo "SHA256: $(sha256sum < "$deb" | cut -d' ' -f1)"
        echo
    done > "$d/Packages"
    printf 'Origin: gpurun-stand-in\nSuite: stand-in\nDate: %s\nArchitectures: %s all\nSHA256:\n %s %s Packages\n' \
        "$(LC_ALL=C date -u -R)" "$(dpkg --print-architecture)" "$(sha256sum < "$d/Packages" | cut -d' ' -f1)" "$(stat -c %s "$d/Packages")" > "$d/Release"
    echo "deb [trusted=yes] file:$REPO_DIR ./" > "$r/etc/apt/sources.list"
    (cd "$d" && ls -- *.deb | sed 's/\.deb$//')
}

# ---------------------------------------------------------------- OCI layout and registry
# Set by the caller: OCI (an OCI layout directory), REG (127.0.0.1:PORT, a plain-HTTP registry),
# STANDINS (a file: one line per image pushed, "REPOSITORY:TAG" or "REPOSITORY@DIGEST").

# The base root R as tag "base" of $OCI: one layer, PATH as in Debian's and Ubuntu's images.
oci_base() {  # R
    umoci init --layout "$OCI"
    umoci new --image "$OCI:empty"
    tar --numeric-owner -C "$1" -cf "$1.tar" .
    umoci raw add-layer --history.created_by pyxis-images.sh --image "$OCI:empty" --tag base "$1.tar"
    rm -f "$1.tar"
    umoci config --no-history --image "$OCI:base" --config.env "PATH=$STANDIN_PATH"
}

# Image REF (REPOSITORY:TAG) in the registry: the base, directory D as a layer on top, the image
# config changed by umoci config's ARG... (--config.env K=V, --config.workingdir...).
standin() {  # REF D [ARG...]
    local ref=$1 d=$2 t; shift 2
    t=$(tr -c 'A-Za-z0-9._\n-' _ <<<"$ref")
    (cd "$d" && find . -mindepth 1 | sort |
        tar --numeric-owner --owner=0 --group=0 --no-recursion -cf "$d.tar" -T -)
    umoci raw add-layer --history.created_by pyxis-images.sh --image "$OCI:base" --tag "$t" "$d.tar"
    [ $# -eq 0 ] || umoci config --no-history --image "$OCI:$t" "$@"
    skopeo copy -q --dest-tls-verify=false "oci:$OCI:$t" "docker://$REG/$ref"
    echo "$ref" >> "$STANDINS"
    rm -rf "$d" "$d.tar"
}

# A fresh directory for an image's own layer.
layer_dir() { mktemp -d "$OCI.layer.XXXXXX"; }

# An executable FILE with the text on stdin.
script() {  # FILE
    mkdir -p "$(dirname "$1")"; cat > "$1"; chmod 755 "$1"
}

# ---------------------------------------------------------------- the kinds of stand-in
# /etc/os-release of Ubuntu VERSION (24.04...) as Ubuntu's images have it, the fields the
# suite greps for ("Ubuntu 22.04", "Ubuntu precise", "Resolute Raccoon").
ubuntu_os_release() {  # VERSION
    local v=$1 full name pretty
    case $v in
        12.04) full="12.04.5 LTS, Precise Pangolin"; name=precise ;;
        14.04) full="14.04.6 LTS, Trusty Tahr"; name=trusty ;;
        16.04) full="16.04.7 LTS (Xenial Xerus)"; name=xenial ;;
        18.04) full="18.04.6 LTS (Bionic Beaver)"; name=bionic ;;
        20.04) full="20.04.6 LTS (Focal Fossa)"; name=focal ;;
        22.04) full="22.04.5 LTS (Jammy Jellyfish)"; name=jammy ;;
        24.04) full="24.04.3 LTS (Noble Numbat)"; name=noble ;;
        26.04) full="26.04 LTS (Resolute Raccoon)"; name=resolute ;;
        *) echo "pyxis-images.sh: no Ubuntu $v" >&2; return 1 ;;
    esac
    pretty="Ubuntu ${full%% (*}"
    [ "$v" != 12.04 ] || pretty="Ubuntu precise (12.04.5 LTS)"
    printf 'PRETTY_NAME="%s"\nNAME="Ubuntu"\nVERSION_ID="%s"\nVERSION="%s"\nVERSION_CODENAME=%s\nID=ubuntu\nID_LIKE=debian\nUBUNTU_CODENAME=%s\n' \
        "${pretty%%,*}" "$v" "$full" "$name" "$name"
}

# A distribution's image: the base labelled as that distribution, FILE in the image (os-release,
# redhat-release) saying TEXT.
label_image() {  # REF FILE TEXT
    local d; d=$(layer_dir)
    mkdir -p "$d$(dirname "$2")"; printf '%s\n' "$3" > "$d$2"
    standin "$1" "$d"
}

# nvidia/cuda:VERSION-{base,runtime}[-ubuntuX.Y]: Ubuntu's label, CUDA's variables, and an
# entrypoint that prints CUDA's banner before it runs the command.
cuda_image() {  # REF
    local tag=${1#*:} d u; d=$(layer_dir)
    u=$(sed -n 's/.*-ubuntu\([0-9.]*\)$/\1/p' <<<"$tag"); u=${u:-18.04}
    mkdir -p "$d/usr/lib"; ubuntu_os_release "$u" > "$d/usr/lib/os-release"
    script "$d/opt/nvidia/nvidia_entrypoint.sh" <<EOS
#!/bin/bash
# stand-in for the CUDA images' entrypoint: the banner, then the command
printf '\n==========\n== CUDA ==\n==========\n\nCUDA Version %s\n\n' "\$CUDA_VERSION"
exec "\$@"
EOS
    standin "$1" "$d" --config.env "CUDA_VERSION=${tag%%-*}" \
        --config.env "PATH=/usr/local/nvidia/bin:/usr/local/cuda/bin:$STANDIN_PATH" \
        --config.env LD_LIBRARY_PATH=/usr/local/nvidia/lib:/usr/local/nvidia/lib64 \
        --config.env NVIDIA_VISIBLE_DEVICES=all --config.env NVIDIA_DRIVER_CAPABILITIES=compute,utility \
        --config.entrypoint /opt/nvidia/nvidia_entrypoint.sh
}

# docker:VERSION-dind-rootless: its entrypoint found by PATH, which sets DOCKER_HOST as Docker's
# sets it when no daemon socket is there (port 2376 with TLS asked for, else 2375).
dind_image() {  # REF
    local d; d=$(layer_dir)
    script "$d/usr/local/bin/dockerd-entrypoint.sh" <<'EOS'
#!/bin/sh
# stand-in for the docker:dind entrypoint: DOCKER_HOST for a client, then the command
if [ -z "${DOCKER_HOST:-}" ] && [ ! -S /var/run/docker.sock ]; then
    if [ -n "${DOCKER_TLS_VERIFY:-}" ] || [ -s "${DOCKER_TLS_CERTDIR:-/none}/client/ca.pem" ]; then
        export DOCKER_HOST=tcp://docker:2376
    else
        export DOCKER_HOST=tcp://docker:2375
    fi
fi
exec "$@"
EOS
    standin "$1" "$d" --config.env DOCKER_TLS_CERTDIR=/certs --config.env "DOCKER_VERSION=${1#*:}" \
        --config.entrypoint dockerd-entrypoint.sh
}

# A PyTorch image (NGC's, Docker Hub's): PYTORCH_VERSION, which is what tells a PyTorch image
# apart, and the working directory /workspace.
pytorch_image() {  # REF PYTORCH_VERSION
    local d; d=$(layer_dir)
    mkdir -p "$d/workspace"
    standin "$1" "$d" --config.env "PYTORCH_VERSION=$2" --config.workingdir /workspace
}

# An application's image reduced to its command: an executable at PATH_IN_IMAGE that prints
# its name, with DIR put first in the image's PATH where given (rabbitmq's /opt/rabbitmq/sbin).
tool_image() {  # REF PATH_IN_IMAGE [DIR]
    local d; d=$(layer_dir)
    printf '#!/bin/sh\necho "%s (gpurun stand-in of %s)"\n' "${2##*/}" "$1" | script "$d$2"
    standin "$1" "$d" ${3:+--config.env "PATH=$3:$STANDIN_PATH"}
}

# The image REF again as REPOSITORY@DIGEST with zstd-compressed layers; prints the digest.
zstd_copy() {  # REF REPOSITORY
    local t; t=$(tr -c 'A-Za-z0-9._\n-' _ <<<"$1")
    skopeo copy -q --dest-tls-verify=false --dest-compress-format zstd --digestfile "$OCI.digest" \
        "oci:$OCI:$t" "docker://$REG/$2:zstd"
    echo "$2@$(cat "$OCI.digest")" >> "$STANDINS"
    cat "$OCI.digest"
}
