/* A stand-in libnvidia-ml for tests without a GPU: two GPUs whose NVML order differs from their
 * minor numbers (index 0 is /dev/nvidia1), driver 550.54.14 with CUDA 12.4, Tesla brand, sm_90;
 * GPU index 0 is in MIG mode with two MIG devices (GPU instances 1 and 2, compute instance 0).
 * Only what gpurun asks; nvml-wrapper reports every other function as missing. */
#include <stdio.h>
#include <string.h>

struct dev { unsigned minor; const char *uuid; unsigned mig, gi, ci; };
static struct dev devs[2] = {
    {1, "GPU-fa4e0000-0000-0000-0000-000000000000", 1, 0, 0},
    {0, "GPU-fa4e1111-1111-1111-1111-111111111111", 0, 0, 0},
};
static struct dev migs[2] = {
    {1, "MIG-f00d0001-0000-0000-0000-000000000000", 0, 1, 0},
    {1, "MIG-f00d0002-0000-0000-0000-000000000000", 0, 2, 0},
};

static int put(char *buf, unsigned len, const char *s) {
    if (strlen(s) + 1 > len) return 7; /* NVML_ERROR_INSUFFICIENT_SIZE */
    strcpy(buf, s);
    return 0;
}

int nvmlInit_v2(void) { return 0; }
int nvmlInitWithFlags(unsigned flags) { (void)flags; return 0; }
int nvmlShutdown(void) { return 0; }
int nvmlSystemGetDriverVersion(char *v, unsigned len) { return put(v, len, "550.54.14"); }
int nvmlSystemGetCudaDriverVersion_v2(int *v) { *v = 12040; return 0; }
int nvmlDeviceGetCount_v2(unsigned *n) { *n = 2; return 0; }
int nvmlDeviceGetHandleByIndex_v2(unsigned i, struct dev **d) {
    if (i >= 2) return 2; /* NVML_ERROR_INVALID_ARGUMENT */
    *d = &devs[i];
    return 0;
}
int nvmlDeviceGetMinorNumber(struct dev *d, unsigned *m) { *m = d->minor; return 0; }
int nvmlDeviceGetUUID(struct dev *d, char *u, unsigned len) { return put(u, len, d->uuid); }
int nvmlDeviceGetName(struct dev *d, char *n, unsigned len) { (void)d; return put(n, len, "Fake H200"); }
int nvmlDeviceGetBrand(struct dev *d, int *b) { (void)d; *b = 2; /* NVML_BRAND_TESLA */ return 0; }
int nvmlDeviceGetCudaComputeCapability(struct dev *d, int *major, int *minor) {
    (void)d; *major = 9; *minor = 0; return 0;
}
int nvmlDeviceGetMigMode(struct dev *d, unsigned *current, unsigned *pending) {
    *current = *pending = d->mig;
    return 0;
}
int nvmlDeviceGetMaxMigDeviceCount(struct dev *d, unsigned *n) { *n = d->mig ? 7 : 0; return 0; }
int nvmlDeviceGetMigDeviceHandleByIndex(struct dev *d, unsigned i, struct dev **m) {
    if (!d->mig || i >= 2) return 6; /* NVML_ERROR_NOT_FOUND */
    *m = &migs[i];
    return 0;
}
int nvmlDeviceGetGpuInstanceId(struct dev *d, unsigned *id) { *id = d->gi; return 0; }
int nvmlDeviceGetComputeInstanceId(struct dev *d, unsigned *id) { *id = d->ci; return 0; }
