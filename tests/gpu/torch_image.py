#!/usr/bin/env python3
"""Make a directory image of a Python virtual environment, from the files of this machine.

  python3 torch_image.py VENV USER [LIBS_JSON]

Run as root. The image holds what the environment's interpreter needs and nothing of the
NVIDIA driver (gpurun brings the driver): the venv, the base interpreter and its standard
library, every other sys.path entry, the system libraries that ldd finds for the interpreter and
for every shared object in the venv and the standard library, plus those listed under
"other_libraries" in LIBS_JSON (a `torch_parity.py checks` line from the host: the libraries a
run loaded, dlopen()ed ones included), and the host's C compiler with what it needs (Triton builds
each kernel's launcher with it), as an image with a compiler has them. Files are hard links where the image shares a file
system with them, copies elsewhere; directories, links and copies are USER's, so gpurun can make
its mount points there. Every path keeps its place (symbolic links along the way are recreated),
so the venv's own paths hold inside. The image goes next to the venv when that file system is
writable and others can reach it, else under /var/tmp; its path is the last line printed.
"""
import concurrent.futures
import json
import os
import pwd
import re
import shutil
import stat
import subprocess
import sys
import tempfile
import time

# The driver's user-space files: gpurun binds the host's own, so an image never carries them.
DRIVER = re.compile(
    r"^(libcuda\.so|libcudadebugger\.so|libnvidia-|libnvcuvid\.so|libnvoptix\.so"
    r"|lib(GLX|EGL|GLESv1_CM|GLESv2)_nvidia\.so|libvdpau_nvidia\.so)"
)
SHARED = re.compile(r"\.so(\.[0-9.]+)?$")


class Image:
    def __init__(self, root, uid, gid, driver_version):
        self.root, self.uid, self.gid = root, uid, gid
        self.driver_suffix = f".so.{driver_version}" if driver_version else None
        self.linked = self.copied = self.copied_bytes = 0
        self.skipped_driver = set()
        # ELF programs and shared objects added: what ldd is asked about
        self.elf = []
        self.interpreters = set()

    def dst(self, p):
        return self.root + p

    def is_driver(self, p):
        name = os.path.basename(p)
        return bool(DRIVER.match(name)) or (
            self.driver_suffix is not None and name.endswith(self.driver_suffix)
        )

    def mkdir(self, d):
        """Directory `d` of the image (an image path), with its parents, the user's."""
        if os.path.isdir(d) and not os.path.islink(d):
            return
        self.mkdir(os.path.dirname(d))
        os.mkdir(d, 0o755)
        os.chown(d, self.uid, self.gid)

    def file(self, src, dst):
        if os.path.lexists(dst):
            return
        self.mkdir(os.path.dirname(dst))
        if SHARED.search(src) or os.stat(src).st_mode & 0o111:
            with open(src, "rb") as f:
                head = f.read(256)
            if head.startswith(b"\x7fELF"):
                self.elf.append(src)
            elif head.startswith(b"#!"):  # a script: its interpreter, by the path it names
                self.interpreters.add(head[2:].split(b"\n")[0].split()[0].decode())
        try:
            os.link(src, dst)
            self.linked += 1
        except OSError:  # another file system, or one that refuses links
            shutil.copy2(src, dst)
            os.chown(dst, self.uid, self.gid)
            self.copied += 1
            self.copied_bytes += os.path.getsize(dst)

    def symlink(self, target, dst):
        if os.path.lexists(dst):
            return
        self.mkdir(os.path.dirname(dst))
        os.symlink(target, dst)
        os.lchown(dst, self.uid, self.gid)

    def add(self, path):
        """The host path `path` at the same place in the image: each symbolic link on the way
        recreated as it is and followed, then the file, or the directory with all it holds."""
        parts = [p for p in os.path.normpath(path).split("/") if p]
        cur = "/"
        for i, name in enumerate(parts):
            nxt = os.path.join(cur, name)
            try:
                st = os.lstat(nxt)
            except FileNotFoundError:
                return
            if i == len(parts) - 1 and self.is_driver(nxt):
                self.skipped_driver.add(nxt)
                return
            if stat.S_ISLNK(st.st_mode):
                target = os.readlink(nxt)
                self.symlink(target, self.dst(nxt))
                resolved = os.path.normpath(os.path.join(cur, target))
                return self.add(os.path.join(resolved, *parts[i + 1 :]))
            if i == len(parts) - 1:
                if stat.S_ISDIR(st.st_mode):
                    self.tree(nxt)
                elif stat.S_ISREG(st.st_mode):
                    self.file(nxt, self.dst(nxt))
            cur = nxt

    def tree(self, top):
        dev = os.lstat(top).st_dev
        for d, dirs, files in os.walk(top):
            self.mkdir(self.dst(d))
            for n in list(dirs):
                p = os.path.join(d, n)
                if os.path.islink(p):
                    self.symlink(os.readlink(p), self.dst(p))
                    dirs.remove(n)
                elif os.lstat(p).st_dev != dev:  # a mount below: not the environment's
                    dirs.remove(n)
            for n in files:
                p = os.path.join(d, n)
                st = os.lstat(p)
                if self.is_driver(p):
                    self.skipped_driver.add(p)
                elif stat.S_ISLNK(st.st_mode):
                    self.symlink(os.readlink(p), self.dst(p))
                elif stat.S_ISREG(st.st_mode):
                    self.file(p, self.dst(p))


def ldd(path):
    """(resolved paths, names not found) of what the loader would load for `path`."""
    r = subprocess.run(["ldd", path], capture_output=True, text=True)
    found, missing = set(), set()
    for line in r.stdout.splitlines():
        m = re.search(r"=>\s+(/\S+)", line) or re.match(r"\s+(/\S+)\s+\(", line)
        if m:
            found.add(m.group(1))
        elif "not found" in line:
            missing.add(line.split("=>")[0].strip())
    return found, missing


def toolchain():
    """(trees, files) of the C compiler and the tools Triton runs when it builds a kernel's
    launcher (`cc`, `/sbin/ldconfig -p`), when the host has them: the image then compiles as the
    host does."""
    path = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"
    files = [shutil.which(t, path=path) for t in ("sh", "cc", "gcc", "as", "ld", "ldconfig")]
    files += ["/sbin/ldconfig", "/sbin/ldconfig.real"]
    files = [f for f in files if f and os.path.exists(f)]
    cc = shutil.which("cc", path=path)
    if not cc:
        return [], files
    ask = lambda *a: subprocess.run([cc, *a], capture_output=True, text=True).stdout.strip()
    trees = [os.path.dirname(ask("-print-prog-name=cc1")), os.path.dirname(ask("-print-libgcc-file-name")),
             "/usr/include"]
    for f in ("crt1.o", "crti.o", "crtn.o", "Scrt1.o", "libc.so", "libc_nonshared.a", "libm.so",
              "libmvec.so", "libpthread.so", "libdl.so", "librt.so"):
        p = ask(f"-print-file-name={f}")
        if os.path.isabs(p) and os.path.exists(p):
            files.append(p)
            if f.endswith(".so") and os.path.getsize(p) < 4096:  # a linker script: what it names
                named = re.findall(r"(/[^\s()*]+)", open(p, errors="replace").read())
                files += [n for n in named if os.path.exists(n)]
    trees = [t for t in dict.fromkeys(trees) if os.path.isabs(t) and os.path.isdir(t)]
    return trees, list(dict.fromkeys(os.path.normpath(f) for f in files))


def under(p, dirs):
    return any(p == d or p.startswith(d.rstrip("/") + "/") for d in dirs)


def reachable(d):
    """Can every user reach directory `d` (search permission on it and its parents)?"""
    while True:
        if not os.stat(d).st_mode & stat.S_IXOTH:
            return False
        if d == "/":
            return True
        d = os.path.dirname(d)


def place(venv):
    """A directory for the image on the venv's file system when possible (links, not copies)."""
    dev = os.stat(venv).st_dev
    for c in ("/var/tmp", "/tmp", os.path.dirname(os.path.dirname(venv)), os.path.dirname(venv)):
        if os.path.isdir(c) and os.stat(c).st_dev == dev and os.access(c, os.W_OK) and reachable(c):
            return c
    return "/var/tmp"


def main():
    venv, user = os.path.abspath(sys.argv[1]), sys.argv[2]
    libs_json = sys.argv[3] if len(sys.argv) > 3 else None
    pw = pwd.getpwnam(user)
    t0 = time.time()
    py = os.path.join(venv, "bin", "python")
    facts = json.loads(
        subprocess.check_output(
            [py, "-I", "-c", "import sys, sysconfig, json; print(json.dumps({'path': sys.path, "
             "'stdlib': sysconfig.get_paths()['stdlib'], 'base': sys.base_prefix, "
             "'exe': sys.executable, 'version': sys.version}))"]
        )
    )
    try:
        version = open("/proc/driver/nvidia/version").read()
        driver = re.search(r"\s(\d+\.\d+(\.\d+)?)\s", version).group(1)
    except (OSError, AttributeError):
        driver = None
    root = tempfile.mkdtemp(prefix="gpurun-torch-image.", dir=place(venv))
    os.chmod(root, 0o755)
    os.chown(root, pw.pw_uid, pw.pw_gid)
    img = Image(root, pw.pw_uid, pw.pw_gid, driver)
    for top in ("/bin", "/sbin", "/lib", "/lib32", "/lib64", "/libx32"):  # merged /usr's links
        if os.path.islink(top):
            img.symlink(os.readlink(top), img.dst(top))
    print(f"python {facts['version'].split()[0]} at {facts['exe']}, base {facts['base']}, "
          f"stdlib {facts['stdlib']}; driver {driver}")
    print(f"image {root} (venv on device {os.stat(venv).st_dev}, image on {os.stat(root).st_dev})")
    trees = [venv, facts["stdlib"]] + [
        p for p in facts["path"] if os.path.isdir(p) and not under(p, [venv, facts["stdlib"]])
    ]
    tool_trees, tool_files = toolchain()
    for t in trees + tool_trees:
        print(f"tree {t}")
        img.add(t)
    print(f"tools: {' '.join(tool_files)}")
    for p in [py] + tool_files:  # the interpreter through the venv's links; the compiler
        img.add(p)
    for p in sorted(img.interpreters):  # of the scripts among them (/sbin/ldconfig on Ubuntu)
        img.add(p)
    needed, missing = set(), set()
    with concurrent.futures.ThreadPoolExecutor(os.cpu_count() or 4) as ex:
        for found, miss in ex.map(ldd, img.elf):
            needed |= found
            missing |= miss
    if libs_json:
        for line in open(libs_json):
            if line.startswith("{"):
                loaded = json.loads(line).get("other_libraries", [])
                # what the run made itself (Triton's launchers in /tmp) is not the host's
                needed |= {p for p in loaded if not under(p, ["/tmp", "/var/tmp", "/dev", "/run"])}
    system = sorted(p for p in needed if not os.path.exists(img.dst(os.path.realpath(p))))
    for p in system:
        img.add(p)
    for p in ["/etc/passwd", "/etc/group", "/etc/hosts", "/etc/nsswitch.conf", "/etc/ld.so.conf",
              "/etc/ld.so.conf.d"]:
        img.add(p)
    for d in ["dev", "proc", "sys", "tmp", "home", "root", "run", "var/tmp", ".gpurun"]:
        img.mkdir(img.dst("/" + d))
    path = f"{venv}/bin:/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"
    with open(img.dst("/.gpurun/meta.json"), "w") as f:
        json.dump({"env": [f"PATH={path}"]}, f)
    os.chown(img.dst("/.gpurun/meta.json"), pw.pw_uid, pw.pw_gid)
    # the image's own loader cache, for the libraries it holds
    subprocess.run(["ldconfig", "-X", "-r", root], stderr=subprocess.DEVNULL)
    print(f"ELF files looked at: {len(img.elf)}; system libraries they need besides: {len(system)}")
    for p in system:
        print(f"  {p}")
    print(f"not found by ldd on the host (left out): {' '.join(sorted(missing)) or 'none'}")
    print(f"driver files left out: {' '.join(sorted(img.skipped_driver)) or 'none'}")
    print(f"{img.linked} files linked, {img.copied} copied ({img.copied_bytes / 2**20:.0f} MiB), "
          f"{time.time() - t0:.1f} s")
    print(root)


if __name__ == "__main__":
    main()
