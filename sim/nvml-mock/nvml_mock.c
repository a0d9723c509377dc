/*
 * A mock libnvidia-ml.so.1: the few NVML entry points imexdra's real NVML backend
 * (src/imexdra/devices/nvml_real.py, over nvidia-ml-py) resolves, answering from a profile file
 * that describes one GB200 compute tray. Written for imexdra; see docs/nvml-mock.md.
 *
 * The library finds its profile by itself: `nvml-mock-profile` in the directory it was loaded
 * from (dladdr on one of its own objects). There is no environment variable and no flag, so the
 * code under test loads it exactly as it loads the real library. The profile is read at each first
 * nvmlInitWithFlags (reference count 0 -> 1), so a rewritten profile is seen by the next session.
 *
 * Types and return codes follow nvml.h's C ABI: nvmlReturn_t is an int-sized enum, nvmlDevice_t an
 * opaque pointer, and nvmlGpuFabricInfo_t is {unsigned char clusterUuid[16]; nvmlReturn_t status;
 * unsigned int cliqueId; unsigned char state;} (28 bytes with its tail padding).
 */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <errno.h>
#include <limits.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define EXPORT __attribute__((visibility("default")))

typedef int nvmlReturn_t;
typedef struct nvmlDevice_st *nvmlDevice_t;
typedef unsigned char nvmlGpuFabricState_t;

typedef struct {
    unsigned char clusterUuid[16];
    nvmlReturn_t status;
    unsigned int cliqueId;
    nvmlGpuFabricState_t state;
} nvmlGpuFabricInfo_t;

enum {
    NVML_SUCCESS = 0,
    NVML_ERROR_UNINITIALIZED = 1,
    NVML_ERROR_INVALID_ARGUMENT = 2,
    NVML_ERROR_INSUFFICIENT_SIZE = 7,
    NVML_ERROR_UNKNOWN = 999,
};

/* Buffer sizes nvml.h guarantees to be enough (the _V2_BUFFER_SIZE ones for names and UUIDs). */
#define UUID_SIZE 96
#define NAME_SIZE 96
#define DRIVER_VERSION_SIZE 80
#define MAX_GPUS 64
#define PROFILE_NAME "nvml-mock-profile"
#define MAX_PROFILE_BYTES 65536

/* nvmlReturn_t values with our own descriptions; the names are the profile's spelling. */
static const struct {
    int code;
    const char *name;
    const char *text;
} return_codes[] = {
    {0, "SUCCESS", "Success"},
    {1, "UNINITIALIZED", "NVML was not initialised"},
    {2, "INVALID_ARGUMENT", "An argument is invalid"},
    {3, "NOT_SUPPORTED", "Not supported on this device"},
    {4, "NO_PERMISSION", "No permission for this operation"},
    {5, "ALREADY_INITIALIZED", "Already initialised"},
    {6, "NOT_FOUND", "Not found"},
    {7, "INSUFFICIENT_SIZE", "Buffer too small"},
    {8, "INSUFFICIENT_POWER", "Insufficient external power"},
    {9, "DRIVER_NOT_LOADED", "The NVIDIA kernel driver is not loaded"},
    {10, "TIMEOUT", "Timed out"},
    {11, "IRQ_ISSUE", "Interrupt request problem"},
    {12, "LIBRARY_NOT_FOUND", "NVML shared library not found"},
    {13, "FUNCTION_NOT_FOUND", "Function not found in the NVML library"},
    {14, "CORRUPTED_INFOROM", "The infoROM is corrupted"},
    {15, "GPU_IS_LOST", "The GPU has fallen off the bus"},
    {16, "RESET_REQUIRED", "The GPU needs a reset"},
    {17, "OPERATING_SYSTEM", "Blocked by the operating system"},
    {18, "LIB_RM_VERSION_MISMATCH", "NVML and kernel driver versions differ"},
    {19, "IN_USE", "In use"},
    {20, "MEMORY", "Out of memory"},
    {21, "NO_DATA", "No data"},
    {22, "VGPU_ECC_NOT_SUPPORTED", "vGPU ECC not supported"},
    {23, "INSUFFICIENT_RESOURCES", "Insufficient resources"},
    {24, "FREQ_NOT_SUPPORTED", "Frequency not supported"},
    {25, "ARGUMENT_VERSION_MISMATCH", "Structure version mismatch"},
    {26, "DEPRECATED", "Deprecated"},
    {27, "NOT_READY", "Not ready yet"},
    {28, "GPU_NOT_FOUND", "GPU not found"},
    {29, "INVALID_STATE", "Invalid state"},
    {30, "RESET_TYPE_NOT_SUPPORTED", "Reset type not supported"},
    {999, "UNKNOWN", "Unknown error"},
};
#define N_RETURN_CODES (sizeof(return_codes) / sizeof(return_codes[0]))

/* The entry points whose answer a profile can replace with an error (`error.<symbol>=<code>`). */
enum call { INIT, SHUTDOWN, DRIVER_VERSION, DEVICE_COUNT, HANDLE_BY_INDEX, UUID, NAME, FABRIC, N_CALLS };
static const char *const call_symbols[N_CALLS] = {
    "nvmlInitWithFlags", "nvmlShutdown", "nvmlSystemGetDriverVersion", "nvmlDeviceGetCount_v2",
    "nvmlDeviceGetHandleByIndex_v2", "nvmlDeviceGetUUID", "nvmlDeviceGetName", "nvmlDeviceGetGpuFabricInfo",
};
#define FIRST_DEVICE_CALL HANDLE_BY_INDEX /* this one and the rest also take `gpu.<i>.error.<symbol>` */

struct fabric {
    unsigned char cluster_uuid[16];
    unsigned int clique_id;
    unsigned int state;
    int status;
};

struct nvmlDevice_st {
    char uuid[UUID_SIZE];
    char name[NAME_SIZE];
    struct fabric fabric;
    int errors[N_CALLS];
};

struct profile {
    char driver_version[DRIVER_VERSION_SIZE];
    unsigned int gpu_count;
    struct fabric fabric; /* every GPU's unless `gpu.<i>.fabric.*` says otherwise */
    char name[NAME_SIZE];
    int errors[N_CALLS];
    struct nvmlDevice_st gpus[MAX_GPUS];
};

static pthread_mutex_t lock = PTHREAD_MUTEX_INITIALIZER;
static unsigned int init_count;
static struct profile active;

/* ---- profile parsing ---------------------------------------------------------------------- */

struct line {
    int number;
    char *key;
    char *value;
};

static char *trim(char *text) {
    while (*text == ' ' || *text == '\t') text++;
    char *end = text + strlen(text);
    while (end > text && (end[-1] == ' ' || end[-1] == '\t' || end[-1] == '\r')) *--end = '\0';
    return text;
}

static int parse_uint(const char *text, unsigned long max, unsigned long *out) {
    if (*text < '0' || *text > '9') return -1;
    char *end;
    errno = 0;
    unsigned long value = strtoul(text, &end, 10);
    if (errno || *end || value > max) return -1;
    *out = value;
    return 0;
}

static int parse_code(const char *text, int *out) {
    unsigned long value;
    if (parse_uint(text, INT_MAX, &value) == 0) {
        *out = (int)value;
        return 0;
    }
    for (size_t i = 0; i < N_RETURN_CODES; i++) {
        if (strcmp(text, return_codes[i].name) == 0) {
            *out = return_codes[i].code;
            return 0;
        }
    }
    return -1;
}

static int hex_digit(char c) {
    if (c >= '0' && c <= '9') return c - '0';
    if (c >= 'a' && c <= 'f') return c - 'a' + 10;
    if (c >= 'A' && c <= 'F') return c - 'A' + 10;
    return -1;
}

/* A canonical 8-4-4-4-12 UUID into its 16 bytes. */
static int parse_uuid(const char *text, unsigned char out[16]) {
    if (strlen(text) != 36) return -1;
    int byte = 0;
    for (int i = 0; i < 36;) {
        if (i == 8 || i == 13 || i == 18 || i == 23) {
            if (text[i++] != '-') return -1;
            continue;
        }
        int high = hex_digit(text[i]), low = hex_digit(text[i + 1]);
        if (high < 0 || low < 0) return -1;
        out[byte++] = (unsigned char)(high << 4 | low);
        i += 2;
    }
    return 0;
}

static int parse_state(const char *text, unsigned int *out) {
    static const char *const names[] = {"not_supported", "not_started", "in_progress", "completed"};
    for (unsigned int i = 0; i < 4; i++) {
        if (strcmp(text, names[i]) == 0) {
            *out = i;
            return 0;
        }
    }
    unsigned long value;
    if (parse_uint(text, 255, &value)) return -1;
    *out = (unsigned int)value;
    return 0;
}

static int copy_text(const char *text, char *out, size_t size) {
    if (strlen(text) >= size) return -1;
    strcpy(out, text);
    return 0;
}

static const char *set_fabric(struct fabric *fabric, const char *field, const char *value) {
    if (strcmp(field, "cluster_uuid") == 0)
        return parse_uuid(value, fabric->cluster_uuid) ? "expected a UUID like 7c9a3e1f-0d2b-4c5e-8f6a-1b2c3d4e5f60" : NULL;
    unsigned long number;
    if (strcmp(field, "clique_id") == 0) {
        if (parse_uint(value, UINT_MAX, &number)) return "expected an unsigned 32-bit number";
        fabric->clique_id = (unsigned int)number;
        return NULL;
    }
    if (strcmp(field, "state") == 0)
        return parse_state(value, &fabric->state) ? "expected not_supported, not_started, in_progress or completed" : NULL;
    if (strcmp(field, "status") == 0)
        return parse_code(value, &fabric->status) ? "expected an NVML return code (number or name)" : NULL;
    return "unknown fabric field";
}

static const char *set_error(int errors[N_CALLS], const char *symbol, const char *value, int first_call) {
    for (int call = first_call; call < N_CALLS; call++) {
        if (strcmp(symbol, call_symbols[call]) == 0)
            return parse_code(value, &errors[call]) ? "expected an NVML return code (number or name)" : NULL;
    }
    return first_call == 0 ? "not an entry point of this library" : "not a per-GPU entry point";
}

static const char *set_global(struct profile *p, const char *key, const char *value) {
    unsigned long number;
    if (strcmp(key, "driver_version") == 0)
        return copy_text(value, p->driver_version, DRIVER_VERSION_SIZE) ? "too long" : NULL;
    if (strcmp(key, "gpu_count") == 0) {
        if (parse_uint(value, MAX_GPUS, &number)) return "expected a number from 0 to 64";
        p->gpu_count = (unsigned int)number;
        return NULL;
    }
    if (strcmp(key, "name") == 0) return copy_text(value, p->name, NAME_SIZE) ? "too long" : NULL;
    if (strncmp(key, "fabric.", 7) == 0) return set_fabric(&p->fabric, key + 7, value);
    if (strncmp(key, "error.", 6) == 0) return set_error(p->errors, key + 6, value, 0);
    return "unknown key";
}

static const char *set_gpu(struct profile *p, const char *key, const char *value) {
    /* key is "gpu.<i>.<field>" */
    const char *rest = key + 4;
    if (*rest < '0' || *rest > '9') return "expected gpu.<index>.<field>";
    char *end;
    errno = 0;
    unsigned long index = strtoul(rest, &end, 10);
    if (end == rest || *end != '.' || errno) return "expected gpu.<index>.<field>";
    if (index >= p->gpu_count) return "GPU index out of range (see gpu_count)";
    struct nvmlDevice_st *gpu = &p->gpus[index];
    const char *field = end + 1;
    if (strcmp(field, "uuid") == 0) return copy_text(value, gpu->uuid, UUID_SIZE) ? "too long" : NULL;
    if (strcmp(field, "name") == 0) return copy_text(value, gpu->name, NAME_SIZE) ? "too long" : NULL;
    if (strncmp(field, "fabric.", 7) == 0) return set_fabric(&gpu->fabric, field + 7, value);
    if (strncmp(field, "error.", 6) == 0) return set_error(gpu->errors, field + 6, value, FIRST_DEVICE_CALL);
    return "unknown GPU field";
}

static void complain(const char *path, int line, const char *message, const char *detail) {
    if (line)
        fprintf(stderr, "nvml-mock: %s:%d: %s: %s\n", path, line, message, detail);
    else
        fprintf(stderr, "nvml-mock: %s: %s: %s\n", path, message, detail);
}

static int profile_path(char *out, size_t size) {
    Dl_info self;
    if (!dladdr(&active, &self) || !self.dli_fname) return -1;
    const char *slash = strrchr(self.dli_fname, '/');
    int dir_length = slash ? (int)(slash - self.dli_fname) : 1;
    const char *dir = slash ? self.dli_fname : ".";
    int written = snprintf(out, size, "%.*s/%s", dir_length, dir, PROFILE_NAME);
    return written < 0 || (size_t)written >= size ? -1 : 0;
}

/* Global keys first, then `gpu.<i>.*` over the GPU defaults they produced, whatever the line order. */
static int load_profile(struct profile *p) {
    char path[PATH_MAX];
    if (profile_path(path, sizeof path)) {
        fprintf(stderr, "nvml-mock: cannot tell where this library was loaded from\n");
        return -1;
    }
    FILE *file = fopen(path, "r");
    if (!file) {
        complain(path, 0, "cannot read the profile", strerror(errno));
        return -1;
    }
    static char text[MAX_PROFILE_BYTES + 1];
    size_t size = fread(text, 1, MAX_PROFILE_BYTES + 1, file);
    fclose(file);
    if (size > MAX_PROFILE_BYTES) {
        complain(path, 0, "profile too large", "over 64 KiB");
        return -1;
    }
    text[size] = '\0';

    static struct line lines[MAX_PROFILE_BYTES / 3 + 1]; /* "k=\n" is the shortest line that counts */
    int n_lines = 0, number = 0;
    for (char *next = text; next && *next;) {
        char *raw = next;
        next = strchr(raw, '\n');
        if (next) *next++ = '\0';
        number++;
        char *content = trim(raw);
        if (!*content || *content == '#') continue;
        char *equals = strchr(content, '=');
        if (!equals) {
            complain(path, number, "expected key=value", content);
            return -1;
        }
        *equals = '\0';
        lines[n_lines++] = (struct line){number, trim(content), trim(equals + 1)};
    }

    memset(p, 0, sizeof *p);
    strcpy(p->driver_version, "570.170.01");
    strcpy(p->name, "NVIDIA GB200");
    p->gpu_count = 4;
    p->fabric.state = 3; /* completed, with an all-zero cluster UUID until the profile names one */
    for (int i = 0; i < n_lines; i++) {
        if (strncmp(lines[i].key, "gpu.", 4) == 0) continue;
        const char *problem = set_global(p, lines[i].key, lines[i].value);
        if (problem) {
            complain(path, lines[i].number, problem, lines[i].key);
            return -1;
        }
    }
    for (unsigned int i = 0; i < p->gpu_count; i++) {
        struct nvmlDevice_st *gpu = &p->gpus[i];
        snprintf(gpu->uuid, UUID_SIZE, "GPU-00000000-0000-4000-8000-%012x", i);
        strcpy(gpu->name, p->name);
        gpu->fabric = p->fabric;
        memcpy(gpu->errors, p->errors, sizeof gpu->errors);
    }
    for (int i = 0; i < n_lines; i++) {
        if (strncmp(lines[i].key, "gpu.", 4) != 0) continue;
        const char *problem = set_gpu(p, lines[i].key, lines[i].value);
        if (problem) {
            complain(path, lines[i].number, problem, lines[i].key);
            return -1;
        }
    }
    return 0;
}

/* ---- entry points ------------------------------------------------------------------------- */

/* The profile's error for `call` (on `gpu`, if given), else UNINITIALIZED outside a session. */
static int refusal(enum call call, const struct nvmlDevice_st *gpu) {
    if (!init_count) return NVML_ERROR_UNINITIALIZED;
    return gpu ? gpu->errors[call] : active.errors[call];
}

static int copy_out(const char *text, char *buffer, unsigned int length) {
    if (!buffer) return NVML_ERROR_INVALID_ARGUMENT;
    if (strlen(text) >= length) return NVML_ERROR_INSUFFICIENT_SIZE;
    strcpy(buffer, text);
    return NVML_SUCCESS;
}

static struct nvmlDevice_st *checked_device(nvmlDevice_t device) {
    for (unsigned int i = 0; i < active.gpu_count; i++) {
        if (device == &active.gpus[i]) return device;
    }
    return NULL;
}

EXPORT nvmlReturn_t nvmlInitWithFlags(unsigned int flags) {
    (void)flags; /* NO_GPUS and friends change nothing here: the tray is what the profile says */
    pthread_mutex_lock(&lock);
    int result = NVML_SUCCESS;
    if (init_count == 0) {
        static struct profile loaded;
        if (load_profile(&loaded))
            result = NVML_ERROR_UNKNOWN;
        else if (loaded.errors[INIT])
            result = loaded.errors[INIT];
        else
            active = loaded;
    } else {
        result = active.errors[INIT];
    }
    if (result == NVML_SUCCESS) init_count++;
    pthread_mutex_unlock(&lock);
    return result;
}

/* nvml.h's nvmlInit is nvmlInit_v2 (no flags); go-nvml probes for the _v2 name when it loads the library
 * and, finding it, calls it (a library without it gets the unversioned name, which no current driver has). */
EXPORT nvmlReturn_t nvmlInit_v2(void) { return nvmlInitWithFlags(0); }

EXPORT nvmlReturn_t nvmlShutdown(void) {
    pthread_mutex_lock(&lock);
    int result = refusal(SHUTDOWN, NULL);
    if (result == NVML_SUCCESS) init_count--;
    pthread_mutex_unlock(&lock);
    return result;
}

EXPORT const char *nvmlErrorString(nvmlReturn_t result) {
    for (size_t i = 0; i < N_RETURN_CODES; i++) {
        if (return_codes[i].code == result) return return_codes[i].text;
    }
    return "Unrecognised NVML return code";
}

EXPORT nvmlReturn_t nvmlSystemGetDriverVersion(char *version, unsigned int length) {
    pthread_mutex_lock(&lock);
    int result = refusal(DRIVER_VERSION, NULL);
    if (result == NVML_SUCCESS) result = copy_out(active.driver_version, version, length);
    pthread_mutex_unlock(&lock);
    return result;
}

EXPORT nvmlReturn_t nvmlDeviceGetCount_v2(unsigned int *count) {
    pthread_mutex_lock(&lock);
    int result = refusal(DEVICE_COUNT, NULL);
    if (result == NVML_SUCCESS && !count) result = NVML_ERROR_INVALID_ARGUMENT;
    if (result == NVML_SUCCESS) *count = active.gpu_count;
    pthread_mutex_unlock(&lock);
    return result;
}

EXPORT nvmlReturn_t nvmlDeviceGetHandleByIndex_v2(unsigned int index, nvmlDevice_t *device) {
    pthread_mutex_lock(&lock);
    int result = init_count ? NVML_SUCCESS : NVML_ERROR_UNINITIALIZED;
    if (result == NVML_SUCCESS && (index >= active.gpu_count || !device)) result = NVML_ERROR_INVALID_ARGUMENT;
    if (result == NVML_SUCCESS) result = refusal(HANDLE_BY_INDEX, &active.gpus[index]);
    if (result == NVML_SUCCESS) *device = &active.gpus[index];
    pthread_mutex_unlock(&lock);
    return result;
}

/* The common head of the per-device calls: a session, a handle of this session, no injected error. */
static int device_call(enum call call, nvmlDevice_t device, struct nvmlDevice_st **gpu) {
    if (!init_count) return NVML_ERROR_UNINITIALIZED;
    *gpu = checked_device(device);
    if (!*gpu) return NVML_ERROR_INVALID_ARGUMENT;
    return refusal(call, *gpu);
}

EXPORT nvmlReturn_t nvmlDeviceGetUUID(nvmlDevice_t device, char *uuid, unsigned int length) {
    pthread_mutex_lock(&lock);
    struct nvmlDevice_st *gpu;
    int result = device_call(UUID, device, &gpu);
    if (result == NVML_SUCCESS) result = copy_out(gpu->uuid, uuid, length);
    pthread_mutex_unlock(&lock);
    return result;
}

EXPORT nvmlReturn_t nvmlDeviceGetName(nvmlDevice_t device, char *name, unsigned int length) {
    pthread_mutex_lock(&lock);
    struct nvmlDevice_st *gpu;
    int result = device_call(NAME, device, &gpu);
    if (result == NVML_SUCCESS) result = copy_out(gpu->name, name, length);
    pthread_mutex_unlock(&lock);
    return result;
}

EXPORT nvmlReturn_t nvmlDeviceGetGpuFabricInfo(nvmlDevice_t device, nvmlGpuFabricInfo_t *info) {
    pthread_mutex_lock(&lock);
    struct nvmlDevice_st *gpu;
    int result = device_call(FABRIC, device, &gpu);
    if (result == NVML_SUCCESS && !info) result = NVML_ERROR_INVALID_ARGUMENT;
    if (result == NVML_SUCCESS) {
        /* Field by field, as a C caller's struct is filled: the tail padding is left alone. */
        memcpy(info->clusterUuid, gpu->fabric.cluster_uuid, sizeof info->clusterUuid);
        info->status = gpu->fabric.status;
        info->cliqueId = gpu->fabric.clique_id;
        info->state = (nvmlGpuFabricState_t)gpu->fabric.state;
    }
    pthread_mutex_unlock(&lock);
    return result;
}
