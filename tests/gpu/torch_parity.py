#!/usr/bin/env python3
"""PyTorch on one GPU, the same program inside a gpurun container and on the host
(tests/gpu/torch-parity.sh runs it both ways, interleaved, and summarises).

  python torch_parity.py startup WHERE      seconds to import torch and to torch.cuda.is_available()
  python torch_parity.py checks WHERE       what a framework needs at run time, each check ok or not
  python torch_parity.py bench WHERE        bf16 matmul TFLOPS (several sizes, MATMUL_SECONDS each),
                                            device copy and pinned host<->device GB/s
                                            (COPY_SECONDS each), the GPU's clocks after the matmuls
  python torch_parity.py summary FILE       medians, spreads and inside/outside ratios (no torch)

Each mode prints one JSON line. WHERE (inside, outside, …) is only copied into the line.
"""
import json
import os
import statistics
import sys
import time


def startup(where):
    t0 = time.perf_counter()
    import torch

    t1 = time.perf_counter()
    ok = torch.cuda.is_available()
    t2 = time.perf_counter()
    return {
        "kind": "startup",
        "where": where,
        "import_s": t1 - t0,
        "is_available_s": t2 - t1,
        "available": ok,
    }


def rel_err(out, ref):
    return float((out.double() - ref).norm() / ref.norm())


# A kernel given to the driver as PTX, so the driver's own JIT (libnvidia-ptxjitcompiler)
# compiles it: out[i] = i + 42.
PTX = b"""
.version 7.8
.target sm_90
.address_size 64
.visible .entry fill42(.param .u64 out, .param .u32 n)
{
    .reg .pred %p<2>;
    .reg .b32 %r<6>;
    .reg .b64 %rd<5>;
    ld.param.u64 %rd1, [out];
    ld.param.u32 %r1, [n];
    mov.u32 %r2, %ctaid.x;
    mov.u32 %r3, %ntid.x;
    mov.u32 %r4, %tid.x;
    mad.lo.s32 %r5, %r2, %r3, %r4;
    setp.ge.u32 %p1, %r5, %r1;
    @%p1 bra DONE;
    cvta.to.global.u64 %rd2, %rd1;
    mul.wide.u32 %rd3, %r5, 4;
    add.s64 %rd4, %rd2, %rd3;
    add.u32 %r5, %r5, 42;
    st.global.u32 [%rd4], %r5;
DONE:
    ret;
}
"""


def check_ptx_jit(torch):
    import ctypes

    cu = ctypes.CDLL("libcuda.so.1")
    n = 1 << 20
    out = torch.full((n,), -1, dtype=torch.int32, device="cuda")
    torch.cuda.synchronize()  # the primary context is current on this thread
    mod, fn = ctypes.c_void_p(), ctypes.c_void_p()
    for what, rc in (
        ("cuModuleLoadData", cu.cuModuleLoadData(ctypes.byref(mod), ctypes.c_char_p(PTX))),
        ("cuModuleGetFunction", cu.cuModuleGetFunction(ctypes.byref(fn), mod, b"fill42")),
    ):
        if rc != 0:
            raise RuntimeError(f"{what}: CUresult {rc}")
    ptr, count = ctypes.c_uint64(out.data_ptr()), ctypes.c_uint32(n)
    args = (ctypes.c_void_p * 2)(ctypes.addressof(ptr), ctypes.addressof(count))
    rc = cu.cuLaunchKernel(fn, n // 256, 1, 1, 256, 1, 1, 0, None, args, None)
    if rc != 0:
        raise RuntimeError(f"cuLaunchKernel: CUresult {rc}")
    torch.cuda.synchronize()
    want = torch.arange(n, dtype=torch.int32, device="cuda") + 42
    if not torch.equal(out, want):
        raise RuntimeError("PTX kernel wrote wrong values")
    cu.cuModuleUnload(mod)
    return "PTX compiled by the driver, kernel right"


# A Triton kernel, in a module of its own (Triton reads a kernel's source from its file).
TRITON_SRC = """
import triton
import triton.language as tl


@triton.jit
def axpy(x_ptr, y_ptr, out_ptr, n, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    mask = offs < n
    x = tl.load(x_ptr + offs, mask=mask)
    y = tl.load(y_ptr + offs, mask=mask)
    tl.store(out_ptr + offs, x * 2 + y, mask=mask)
"""


def check_triton(torch, tmp):
    """Triton compiles the kernel (its own ptxas) and builds the launcher with the C compiler,
    against the libcuda.so it finds (`ldconfig -p`, then LD_LIBRARY_PATH)."""
    import importlib.util

    path = os.path.join(tmp, "triton_axpy.py")
    with open(path, "w") as f:
        f.write(TRITON_SRC)
    spec = importlib.util.spec_from_file_location("triton_axpy", path)
    m = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(m)
    n = 1 << 20
    x, y = torch.randn(n, device="cuda"), torch.randn(n, device="cuda")
    out = torch.full_like(x, float("nan"))
    m.axpy[((n + 1023) // 1024,)](x, y, out, n, BLOCK=1024)
    if not torch.allclose(out, x * 2 + y):
        raise RuntimeError("Triton kernel wrote wrong values")
    return f"Triton {m.triton.__version__}: kernel and launcher built, result right"


def _ipc_child(q, r):
    import torch

    t = q.get()
    t.add_(1)
    torch.cuda.synchronize()
    r.put(float(t.sum()))


def check_ipc(torch):
    import queue

    import torch.multiprocessing as mp

    ctx = mp.get_context("spawn")
    q, r = ctx.Queue(), ctx.Queue()
    p = ctx.Process(target=_ipc_child, args=(q, r))
    p.start()
    t = torch.zeros(1 << 20, device="cuda")
    q.put(t)
    child = None
    for _ in range(90):  # until the child answers, exits or 90 s have passed
        try:
            child = r.get(timeout=1)
            break
        except queue.Empty:
            if not p.is_alive():
                raise RuntimeError(f"the child exited with {p.exitcode}") from None
    p.join(30)
    torch.cuda.synchronize()
    if child != float(1 << 20) or float(t.sum()) != float(1 << 20):
        raise RuntimeError(f"child saw {child}, parent sees {float(t.sum())}")
    return "a CUDA tensor shared with a spawned process, its write seen by the parent"


def check_nccl(torch, tmp):
    import torch.distributed as dist

    dist.init_process_group(
        "nccl", init_method=f"file://{tmp}/nccl-store", rank=0, world_size=1
    )
    try:
        x = torch.arange(1 << 20, dtype=torch.float32, device="cuda")
        dist.all_reduce(x)
        torch.cuda.synchronize()
        if float(x[-1]) != float((1 << 20) - 1):
            raise RuntimeError("all_reduce over one rank changed the data")
    finally:
        dist.destroy_process_group()
    return "NCCL %s: all_reduce" % ".".join(map(str, torch.cuda.nccl.version()))


def checks(where):
    import tempfile

    # Fresh caches: each side compiles its own kernels (they share /tmp).
    tmp = tempfile.mkdtemp(prefix="torch-parity-")
    os.environ["TRITON_CACHE_DIR"] = os.path.join(tmp, "triton")
    import torch
    import torch.nn.functional as F

    out = {"kind": "checks", "where": where, "torch": torch.__version__}
    results = {}

    def run(name, f):
        try:
            results[name] = {"ok": True, "detail": f()}
        except Exception as e:  # each check reports its own failure
            results[name] = {"ok": False, "detail": f"{type(e).__name__}: {e}"}

    def device():
        if not torch.cuda.is_available():
            raise RuntimeError("torch.cuda.is_available() is False")
        p = torch.cuda.get_device_properties(0)
        return {
            "count": torch.cuda.device_count(),
            "name": torch.cuda.get_device_name(0),
            "capability": list(torch.cuda.get_device_capability(0)),
            "memory_gib": round(p.total_memory / 2**30, 1),
            "multiprocessors": p.multi_processor_count,
            "cuda_runtime": torch.version.cuda,
        }

    def driver_version():
        import ctypes

        v = ctypes.c_int()
        ctypes.CDLL("libcuda.so.1").cuDriverGetVersion(ctypes.byref(v))
        return v.value

    def nvml():
        import pynvml

        pynvml.nvmlInit()
        h = pynvml.nvmlDeviceGetHandleByIndex(0)
        return {
            "driver": pynvml.nvmlSystemGetDriverVersion(),
            "count": pynvml.nvmlDeviceGetCount(),
            "name": pynvml.nvmlDeviceGetName(h),
        }

    def matmul():
        a = torch.randn(4096, 4096, device="cuda", dtype=torch.bfloat16)
        b = torch.randn(4096, 4096, device="cuda", dtype=torch.bfloat16)
        e = rel_err(a @ b, a.double() @ b.double())
        if not e < 1e-2:
            raise RuntimeError(f"relative error {e:.2e}")
        return f"bf16 4096^3, relative error {e:.1e}"

    def linear_bias():  # a bias epilogue: cuBLASLt
        x = torch.randn(2048, 4096, device="cuda", dtype=torch.bfloat16)
        w = torch.randn(1024, 4096, device="cuda", dtype=torch.bfloat16)
        b = torch.randn(1024, device="cuda", dtype=torch.bfloat16)
        e = rel_err(F.linear(x, w, b), F.linear(x.double(), w.double(), b.double()))
        if not e < 1e-2:
            raise RuntimeError(f"relative error {e:.2e}")
        return f"relative error {e:.1e}"

    def fp8():  # Hopper's fp8 matmul, cuBLASLt only
        a = torch.randn(1024, 1024, device="cuda").to(torch.float8_e4m3fn)
        b = torch.randn(1024, 1024, device="cuda").to(torch.float8_e4m3fn)
        one = torch.tensor(1.0, device="cuda")
        o = torch._scaled_mm(a, b.t(), scale_a=one, scale_b=one, out_dtype=torch.bfloat16)
        e = rel_err(o, a.double() @ b.double().t())
        if not e < 2e-2:
            raise RuntimeError(f"relative error {e:.2e}")
        return f"relative error {e:.1e}"

    def cudnn():
        x = torch.randn(8, 64, 56, 56, device="cuda", dtype=torch.bfloat16)
        w = torch.randn(128, 64, 3, 3, device="cuda", dtype=torch.bfloat16)
        e = rel_err(F.conv2d(x, w, padding=1), F.conv2d(x.double(), w.double(), padding=1))
        if not e < 1e-2:
            raise RuntimeError(f"relative error {e:.2e}")
        return f"cuDNN {torch.backends.cudnn.version()}, conv2d relative error {e:.1e}"

    def nvrtc():  # a kernel compiled at run time by NVRTC (jiterator)
        fn = torch.cuda.jiterator._create_jit_fn(
            "template <typename T> T axpy(T x, T y) { return x * 2 + y; }"
        )
        x = torch.randn(1 << 20, device="cuda")
        y = torch.randn(1 << 20, device="cuda")
        if not torch.allclose(fn(x, y), x * 2 + y):
            raise RuntimeError("jiterator result wrong")
        return "jiterator kernel right"

    def big_alloc():
        t = torch.empty(100 * 2**30, dtype=torch.uint8, device="cuda")
        t[-1] = 7
        v = int(t[-1])
        del t
        torch.cuda.empty_cache()
        if v != 7:
            raise RuntimeError("last byte not written")
        return "100 GiB on the device"

    def pinned():
        h = torch.empty(8 * 2**30, dtype=torch.uint8, pin_memory=True)
        ok = h.is_pinned()
        del h
        if not ok:
            raise RuntimeError("not pinned")
        return "8 GiB of pinned host memory"

    run("device", device)
    run("driver_api", driver_version)
    run("nvml", nvml)
    run("matmul_bf16", matmul)
    run("linear_bias_cublaslt", linear_bias)
    run("fp8_scaled_mm_cublaslt", fp8)
    run("cudnn_conv", cudnn)
    run("nvrtc_jiterator", nvrtc)
    run("driver_ptx_jit", lambda: check_ptx_jit(torch))
    run("triton_kernel", lambda: check_triton(torch, tmp))
    run("nccl_one_rank", lambda: check_nccl(torch, tmp))
    run("cuda_ipc_spawn", lambda: check_ipc(torch))
    run("device_100gib", big_alloc)
    run("pinned_8gib", pinned)
    out["checks"] = results
    out["env"] = {k: os.environ.get(k) for k in ("LD_LIBRARY_PATH", "CUDA_VISIBLE_DEVICES", "HOME")}
    out["limits"] = limits()
    libs = loaded_libraries()
    cuda = [p for p in libs if any(w in p for w in CUDA_LIBS)]
    out["cuda_libraries"] = cuda
    out["other_libraries"] = [p for p in libs if p not in cuda and not p.startswith(sys.prefix)]
    return out


def limits():
    """What bounds memory and files here: locked memory, open files, /dev/shm."""
    import resource

    out = {
        "memlock": resource.getrlimit(resource.RLIMIT_MEMLOCK)[0],
        "nofile": resource.getrlimit(resource.RLIMIT_NOFILE)[0],
    }
    try:
        shm = os.statvfs("/dev/shm")
        out["dev_shm_gib"] = round(shm.f_blocks * shm.f_frsize / 2**30, 1)
    except OSError as e:
        out["dev_shm_gib"] = str(e)
    return out


CUDA_LIBS = ("libcuda", "libnvidia", "cublas", "cudnn", "nccl", "nvrtc", "nvJitLink", "cudart",
             "cusparse", "cufft", "curand", "cusolver")


def loaded_libraries():
    """The shared libraries this process has mapped: where each CUDA library came from, and the
    system libraries an image of this environment must hold."""
    libs = set()
    with open("/proc/self/maps") as f:
        for line in f:
            p = line.split(None, 5)
            if len(p) == 6 and ".so" in p[5]:
                libs.add(p[5].strip())
    return sorted(libs)


def bench(where, seconds, copy_seconds):
    import torch

    def timed(step, seconds, n_cal=3):
        """(iterations, seconds) of `step` repeated for about `seconds`, timed with events."""
        for _ in range(2):
            step()
        s, e = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        s.record()
        for _ in range(n_cal):
            step()
        e.record()
        e.synchronize()
        iters = max(n_cal, int(seconds / (s.elapsed_time(e) / 1000 / n_cal)))
        s.record()
        for _ in range(iters):
            step()
        e.record()
        e.synchronize()
        return iters, s.elapsed_time(e) / 1000

    out = {"kind": "bench", "where": where}
    torch.manual_seed(0)
    for n in (4096, 8192, 16384):
        a = torch.randn(n, n, device="cuda", dtype=torch.bfloat16)
        b = torch.randn(n, n, device="cuda", dtype=torch.bfloat16)
        c = torch.empty(n, n, device="cuda", dtype=torch.bfloat16)
        iters, t = timed(lambda: torch.mm(a, b, out=c), seconds)
        out[f"mm{n}_tflops"] = 2 * n**3 * iters / t / 1e12
        del a, b, c
    out.update(clocks())
    # device memory: a copy of 4 GiB reads and writes 8 GiB
    size = 4 * 2**30
    src = torch.randint(0, 255, (size,), dtype=torch.uint8, device="cuda")
    dst = torch.empty_like(src)
    iters, t = timed(lambda: dst.copy_(src), copy_seconds)
    out["d2d_gbs"] = 2 * size * iters / t / 1e9
    del src, dst
    # host<->device with pinned memory, 1 GiB a copy
    size = 2**30
    d = torch.randint(0, 255, (size,), dtype=torch.uint8, device="cuda")
    h = torch.empty(size, dtype=torch.uint8, pin_memory=True)
    h.copy_(d)
    iters, t = timed(lambda: d.copy_(h, non_blocking=True), copy_seconds, 2)
    out["h2d_gbs"] = size * iters / t / 1e9
    iters, t = timed(lambda: h.copy_(d, non_blocking=True), copy_seconds, 2)
    out["d2h_gbs"] = size * iters / t / 1e9
    return out


def clocks():
    """SM and memory clocks, temperature and power of GPU 0 now (NVML), for drift."""
    try:
        import pynvml

        pynvml.nvmlInit()
        h = pynvml.nvmlDeviceGetHandleByIndex(0)
        return {
            "sm_mhz": pynvml.nvmlDeviceGetClockInfo(h, pynvml.NVML_CLOCK_SM),
            "mem_mhz": pynvml.nvmlDeviceGetClockInfo(h, pynvml.NVML_CLOCK_MEM),
            "temp_c": pynvml.nvmlDeviceGetTemperature(h, pynvml.NVML_TEMPERATURE_GPU),
            "power_w": pynvml.nvmlDeviceGetPowerUsage(h) / 1000,
        }
    except Exception as e:
        return {"clocks_error": f"{type(e).__name__}: {e}"}


# (metric, unit) of each kind of run
METRICS = {
    "bench": [
        ("mm4096_tflops", "TFLOPS"),
        ("mm8192_tflops", "TFLOPS"),
        ("mm16384_tflops", "TFLOPS"),
        ("d2d_gbs", "GB/s"),
        ("h2d_gbs", "GB/s"),
        ("d2h_gbs", "GB/s"),
    ],
    "startup": [
        ("wall_ms", "ms"),
        ("import_s", "s"),
        ("is_available_s", "s"),
        ("rest_ms", "ms"),
    ],
}
LABELS = {
    "mm4096_tflops": "bf16 matmul 4096³",
    "mm8192_tflops": "bf16 matmul 8192³",
    "mm16384_tflops": "bf16 matmul 16384³",
    "d2d_gbs": "device copy 4 GiB (read+write)",
    "h2d_gbs": "host→device, pinned, 1 GiB",
    "d2h_gbs": "device→host, pinned, 1 GiB",
    "wall_ms": "start to exit: import torch; cuda.is_available()",
    "import_s": "in the process: import torch",
    "is_available_s": "in the process: torch.cuda.is_available()",
    "rest_ms": "the rest: interpreter start, container set-up and exit",
}


def fmt(v):
    return f"{v:.4g}" if abs(v) < 1000 else f"{v:.0f}"


def summary(path):
    """Markdown tables: per group (kind and series) and metric, the median and range of each
    side, the ratio of the medians (inside/outside) and the range of the per-pair ratios."""
    rows = [json.loads(line) for line in open(path) if line.startswith("{")]
    for r in rows:
        if {"wall_ms", "import_s", "is_available_s"} <= r.keys():
            r["rest_ms"] = r["wall_ms"] - 1000 * (r["import_s"] + r["is_available_s"])
    groups = {}
    for r in rows:
        if r.get("kind") in ("bench", "startup") and "pair" in r:
            groups.setdefault((r["kind"], r.get("series", r["kind"])), []).append(r)
    lines = []
    for (kind, series), rs in groups.items():
        sides = sorted({r["where"] for r in rs if r["where"] != "outside"})
        for side in sides:
            pairs = {}
            for r in rs:
                if r["where"] in (side, "outside"):
                    pairs.setdefault(r["pair"], {})[r["where"]] = r
            full = [p for _, p in sorted(pairs.items()) if len(p) == 2]
            if not full:
                continue
            n = f"{len(full)} interleaved pair" + ("s" if len(full) > 1 else "")
            lines.append(f"\n{series}: {side} against outside, {n}\n")
            lines.append(f"| | {side}: median (min–max) | outside: median (min–max) | ratio of medians | per-pair ratios (min–max) |")
            lines.append("|---|---|---|---|---|")
            for m, unit in METRICS[kind]:
                if not all(m in p[side] and m in p["outside"] for p in full):
                    continue
                a = [p[side][m] for p in full]
                b = [p["outside"][m] for p in full]
                ratios = [x / y for x, y in zip(a, b)]
                ma, mb = statistics.median(a), statistics.median(b)
                lines.append(
                    f"| {LABELS[m]} ({unit}) | {fmt(ma)} ({fmt(min(a))}–{fmt(max(a))}) "
                    f"| {fmt(mb)} ({fmt(min(b))}–{fmt(max(b))}) | {ma / mb:.4f} "
                    f"| {min(ratios):.4f}–{max(ratios):.4f} |"
                )
            clk = [p[w]["sm_mhz"] for p in full for w in (side, "outside") if "sm_mhz" in p[w]]
            if clk:
                temps = [p[w]["temp_c"] for p in full for w in (side, "outside")]
                lines.append(
                    f"\nSM clock after the matmuls: {min(clk)}–{max(clk)} MHz, "
                    f"temperature {min(temps)}–{max(temps)} °C"
                )
    return "\n".join(lines)


def main():
    mode = sys.argv[1]
    if mode == "summary":
        print(summary(sys.argv[2]))
        return
    where = sys.argv[2]
    if mode == "startup":
        out = startup(where)
    elif mode == "checks":
        out = checks(where)
    elif mode == "bench":
        out = bench(where, float(os.environ.get("MATMUL_SECONDS", "1.5")),
                    float(os.environ.get("COPY_SECONDS", "1.0")))
    else:
        sys.exit(f"unknown mode {mode}")
    print(json.dumps(out), flush=True)


if __name__ == "__main__":
    main()
