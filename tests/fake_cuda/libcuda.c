/*
 * A stand-in for the NVIDIA driver library (libcuda.so) on machines without a
 * GPU, so tests can drive the backend's real CUDA code (cudarc, loaded at run
 * time) through the answers of a driver: device count, name, memory, compute
 * capability, contexts, device-to-host copies.
 *
 * It fakes the hardware, not the backend: tests/test_gpu.py says which
 * results come from it. Built by the test with `cc -shared -fPIC`.
 *
 *   FAKE_CUDA_DEVICES  number of devices (default 1)
 *   FAKE_CUDA_CC       compute capability "MAJOR.MINOR" (default 8.6)
 *   FAKE_CUDA_NAME     device name (default "Fake GPU")
 *   FAKE_CUDA_LOG      if set, every call appends its name to this file
 *
 * "Device memory" is host memory here: cuMemcpyDtoH copies from the pointer.
 */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

typedef int CUresult;
typedef int CUdevice;
typedef void *CUcontext;
typedef unsigned long long CUdeviceptr;

enum {
    CUDA_SUCCESS = 0,
    CUDA_ERROR_INVALID_VALUE = 1,
    CUDA_ERROR_NOT_INITIALIZED = 3,
    CUDA_ERROR_NO_DEVICE = 100,
    CUDA_ERROR_INVALID_DEVICE = 101,
};

enum {
    ATTR_CC_MAJOR = 75,
    ATTR_CC_MINOR = 76,
};

static int initialized;
static char contexts[64]; /* one primary context per device: its address */
static CUcontext current;

static void trace(const char *fn) {
    const char *path = getenv("FAKE_CUDA_LOG");
    if (!path) return;
    FILE *f = fopen(path, "a");
    if (f) {
        fprintf(f, "%s\n", fn);
        fclose(f);
    }
}

static int device_count(void) {
    const char *n = getenv("FAKE_CUDA_DEVICES");
    int count = n ? atoi(n) : 1;
    return count < 0 ? 0 : (count > 64 ? 64 : count);
}

static int valid(CUdevice dev) { return dev >= 0 && dev < device_count(); }

CUresult cuInit(unsigned int flags) {
    trace("cuInit");
    (void)flags;
    initialized = 1;
    return device_count() ? CUDA_SUCCESS : CUDA_ERROR_NO_DEVICE;
}

CUresult cuDeviceGetCount(int *count) {
    trace("cuDeviceGetCount");
    if (!initialized) return CUDA_ERROR_NOT_INITIALIZED;
    *count = device_count();
    return CUDA_SUCCESS;
}

CUresult cuDeviceGet(CUdevice *dev, int ordinal) {
    trace("cuDeviceGet");
    if (!initialized) return CUDA_ERROR_NOT_INITIALIZED;
    if (!valid(ordinal)) return CUDA_ERROR_INVALID_DEVICE;
    *dev = ordinal;
    return CUDA_SUCCESS;
}

CUresult cuDeviceGetName(char *name, int len, CUdevice dev) {
    trace("cuDeviceGetName");
    if (!valid(dev)) return CUDA_ERROR_INVALID_DEVICE;
    const char *n = getenv("FAKE_CUDA_NAME");
    snprintf(name, (size_t)len, "%s", n ? n : "Fake GPU");
    return CUDA_SUCCESS;
}

CUresult cuDeviceTotalMem_v2(size_t *bytes, CUdevice dev) {
    trace("cuDeviceTotalMem_v2");
    if (!valid(dev)) return CUDA_ERROR_INVALID_DEVICE;
    *bytes = (size_t)16 << 30;
    return CUDA_SUCCESS;
}

CUresult cuDeviceGetAttribute(int *value, int attribute, CUdevice dev) {
    trace("cuDeviceGetAttribute");
    if (!valid(dev)) return CUDA_ERROR_INVALID_DEVICE;
    const char *cc = getenv("FAKE_CUDA_CC");
    int major = 8, minor = 6;
    if (cc) sscanf(cc, "%d.%d", &major, &minor);
    switch (attribute) {
    case ATTR_CC_MAJOR: *value = major; break;
    case ATTR_CC_MINOR: *value = minor; break;
    default: *value = 0; break; /* e.g. memory pools: not supported */
    }
    return CUDA_SUCCESS;
}

CUresult cuDevicePrimaryCtxRetain(CUcontext *ctx, CUdevice dev) {
    trace("cuDevicePrimaryCtxRetain");
    if (!valid(dev)) return CUDA_ERROR_INVALID_DEVICE;
    *ctx = &contexts[dev];
    return CUDA_SUCCESS;
}

CUresult cuDevicePrimaryCtxRelease_v2(CUdevice dev) {
    trace("cuDevicePrimaryCtxRelease_v2");
    return valid(dev) ? CUDA_SUCCESS : CUDA_ERROR_INVALID_DEVICE;
}

CUresult cuCtxGetCurrent(CUcontext *ctx) {
    trace("cuCtxGetCurrent");
    *ctx = current;
    return CUDA_SUCCESS;
}

CUresult cuCtxSetCurrent(CUcontext ctx) {
    trace("cuCtxSetCurrent");
    current = ctx;
    return CUDA_SUCCESS;
}

CUresult cuMemcpyDtoH_v2(void *dst, CUdeviceptr src, size_t bytes) {
    trace("cuMemcpyDtoH_v2");
    if (!current) return CUDA_ERROR_INVALID_VALUE;
    memcpy(dst, (const void *)(uintptr_t)src, bytes);
    return CUDA_SUCCESS;
}

static const char *describe(CUresult error) {
    switch (error) {
    case CUDA_SUCCESS: return "no error";
    case CUDA_ERROR_INVALID_VALUE: return "invalid argument";
    case CUDA_ERROR_NOT_INITIALIZED: return "initialization error";
    case CUDA_ERROR_NO_DEVICE: return "no CUDA-capable device is detected";
    case CUDA_ERROR_INVALID_DEVICE: return "invalid device ordinal";
    default: return "unknown error";
    }
}

CUresult cuGetErrorString(CUresult error, const char **text) {
    *text = describe(error);
    return CUDA_SUCCESS;
}

CUresult cuGetErrorName(CUresult error, const char **text) {
    *text = error == CUDA_ERROR_INVALID_DEVICE ? "CUDA_ERROR_INVALID_DEVICE" : "CUDA_ERROR";
    return CUDA_SUCCESS;
}
