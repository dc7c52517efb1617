/* The CUDA provider of struct ckpt_gpu_ops (lib/gpu/gpu.h), built as the module libckpt-cuda.so.0 and
 * loaded by lib/gpu/gpu.c at run time, so that libckpt.so itself never links libcudart.
 *
 * It uses the CUDA runtime API only (compiled with the C compiler, no nvcc), and does not link
 * libcudart: init() loads it with dlopen (rt_load below), preferring a runtime already loaded in
 * the process (torch's), then libcudart.so.13, then libcudart.so.12, so that one module works
 * with CUDA 12 and 13 drivers and never loads a second runtime beside the caller's. Functions
 * newer than CUDA 12.0 (cudaStreamGetDevice) are optional. It does not link
 * libckpt: errors are reported through the `fail` callback that the core hands to init().
 *
 * Streams: stream_create() returns a struct lstream (the cudaStream_t and its device), not a bare
 * cudaStream_t, so that every later op can make the stream's device current. User streams (the
 * trainer's) are bare cudaStream_t; NULL means the legacy default stream of the library stream's
 * device.
 *
 * Current device: each op that needs a device makes it current and then restores what the calling
 * thread had — its exact context when the driver's cuCtxGetCurrent/cuCtxSetCurrent are reachable
 * (libcuda.so.1 is already loaded by libcudart; looked up with RTLD_NOLOAD, never linked). A thread
 * with no current context at all (a libckpt worker thread) is left on the device it was given:
 * switching it back to "device 0" would create a context on GPU 0 in every process that does not
 * use GPU 0 (the classic multi-rank memory leak). */
#include <dlfcn.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <cuda_runtime_api.h>

#include "ckpt.h"
#include "gpu/gpu.h"

#define EXPORT __attribute__((visibility("default")))

typedef int (*fail_fn)(int err, const char *fmt, ...);

static fail_fn g_fail;
/* Driver context functions (CUresult f(CUcontext *) / f(CUcontext)); NULL when unavailable. */
static int (*p_ctx_get)(void **ctx);
static int (*p_ctx_set)(void *ctx);
static int (*p_ctx_dev)(int *dev);                     /* cuCtxGetDevice */
static int (*p_stream_ctx)(void *stream, void **ctx); /* cuStreamGetCtx (CUDA 9.2) */
static int (*p_primary_state)(int dev, unsigned *flags, int *active); /* cuDevicePrimaryCtxGetState */
/* Device of the first library stream: where host-only ops (pinned allocation) run on a thread
 * that has no context yet. */
static int g_home_dev = -1; /* accessed with __atomic builtins */


/* The runtime functions the provider calls, resolved from the loaded libcudart. Calls below use
 * the ordinary names, which the macros after this table redirect. */
#define RT_FUNCS(X)                                                                               \
	X(cudaGetDeviceCount) X(cudaGetDevice) X(cudaSetDevice) X(cudaGetLastError)               \
	X(cudaGetErrorString) X(cudaGetErrorName) X(cudaHostAlloc) X(cudaFreeHost)                \
	X(cudaStreamCreateWithFlags) X(cudaStreamDestroy) X(cudaEventCreateWithFlags)             \
	X(cudaEventRecord) X(cudaEventDestroy) X(cudaStreamWaitEvent) X(cudaMemcpyAsync)          \
	X(cudaStreamSynchronize) X(cudaPointerGetAttributes) X(cudaHostGetDevicePointer)          \
	X(cudaRuntimeGetVersion) X(cudaHostRegister) X(cudaHostUnregister)                        \
	X(cudaEventSynchronize)
#define RT_DECL(f) static __typeof__(f) *p_##f;
RT_FUNCS(RT_DECL)
/* Optional (CUDA 12.8 and later). */
static cudaError_t (*p_cudaStreamGetDevice)(cudaStream_t, int *);
static void *g_rt;            /* the runtime's handle */
static char g_rt_name[64];    /* its soname, for messages */
#define cudaGetDeviceCount p_cudaGetDeviceCount
#define cudaGetDevice p_cudaGetDevice
#define cudaSetDevice p_cudaSetDevice
#define cudaGetLastError p_cudaGetLastError
#define cudaGetErrorString p_cudaGetErrorString
#define cudaGetErrorName p_cudaGetErrorName
#define cudaHostAlloc p_cudaHostAlloc
#define cudaFreeHost p_cudaFreeHost
#define cudaStreamCreateWithFlags p_cudaStreamCreateWithFlags
#define cudaStreamDestroy p_cudaStreamDestroy
#define cudaEventCreateWithFlags p_cudaEventCreateWithFlags
#define cudaEventRecord p_cudaEventRecord
#define cudaEventDestroy p_cudaEventDestroy
#define cudaStreamWaitEvent p_cudaStreamWaitEvent
#define cudaMemcpyAsync p_cudaMemcpyAsync
#define cudaStreamSynchronize p_cudaStreamSynchronize
#define cudaPointerGetAttributes p_cudaPointerGetAttributes
#define cudaHostGetDevicePointer p_cudaHostGetDevicePointer
#define cudaRuntimeGetVersion p_cudaRuntimeGetVersion
#define cudaHostRegister p_cudaHostRegister
#define cudaHostUnregister p_cudaHostUnregister
#define cudaEventSynchronize p_cudaEventSynchronize
/* cuStreamWaitValue32 (CUresult f(CUstream, CUdeviceptr, cuuint32_t, unsigned)), from the driver;
 * NULL when the driver lacks it. */
static int (*p_wait_value)(void *stream, uintptr_t addr, uint32_t value, unsigned flags);

struct lstream {
	cudaStream_t s;
	int dev;
};

/* --- errors ------------------------------------------------------------------------------- */

static int err_code(cudaError_t e)
{
	switch (e) {
	case cudaErrorMemoryAllocation:
		return CKPT_E_NOMEM;
	case cudaErrorInvalidValue:
	case cudaErrorInvalidDevice:
	case cudaErrorInvalidDevicePointer:
	case cudaErrorInvalidResourceHandle:
	case cudaErrorInvalidMemcpyDirection:
		return CKPT_E_INVAL;
	case cudaErrorNoDevice:
	case cudaErrorInsufficientDriver:
		return CKPT_E_UNSUPPORTED;
	default:
		return CKPT_E_IO;
	}
}

/* Turns a failed CUDA call into a negative CKPT_E_* code and a message "cuda: <call>: <error>". */
static int cu_check(cudaError_t e, const char *call)
{
	if (e == cudaSuccess)
		return 0;
	int code = err_code(e);
	/* Reset the runtime's last error (a no-op for sticky errors, which stay reported). */
	(void)cudaGetLastError();
	if (g_fail)
		g_fail(code, "cuda: %s: %s (%s)", call, cudaGetErrorString(e), cudaGetErrorName(e));
	return -code;
}

/* Every CUDA call goes through CU(function, arguments...). */
#define CU(fn, ...) cu_check(fn(__VA_ARGS__), #fn)

static int report(int code, const char *msg)
{
	if (g_fail)
		g_fail(code, "cuda: %s", msg);
	return -code;
}

/* --- current device ------------------------------------------------------------------------ */

struct devguard {
	int changed;
	int prev;
	void *ctx;
};

/* 1 when the calling thread has a current CUDA context (or when that cannot be told). */
static int thread_has_ctx(void **ctx)
{
	*ctx = NULL;
	if (p_ctx_get && p_ctx_get(ctx) == 0 && !*ctx)
		return 0;
	return 1;
}

/* Makes dev current on the calling thread (dev < 0: leaves it as it is). */
static int dev_enter(int dev, struct devguard *g)
{
	g->changed = 0;
	if (dev < 0)
		return 0;
	void *ctx;
	int cur = -1;
	int has = thread_has_ctx(&ctx);
	if (has) {
		int rc = CU(cudaGetDevice, &cur);
		if (rc)
			return rc;
		if (cur == dev)
			return 0;
	}
	int rc = CU(cudaSetDevice, dev);
	if (rc)
		return rc;
	if (has) {
		g->changed = 1;
		g->prev = cur;
		g->ctx = ctx;
	}
	return 0;
}

static void dev_leave(const struct devguard *g)
{
	if (!g->changed)
		return;
	if (g->ctx && p_ctx_set && p_ctx_set(g->ctx) == 0)
		return;
	if (cudaSetDevice(g->prev) != cudaSuccess)
		(void)cudaGetLastError();
}

/* For ops on host memory only: the device to use on a thread without a context, else -1. */
static int host_op_dev(void)
{
	void *ctx;
	if (thread_has_ctx(&ctx))
		return -1;
	int d = __atomic_load_n(&g_home_dev, __ATOMIC_RELAXED);
	return d >= 0 ? d : 0;
}

static cudaStream_t raw(const void *stream)
{
	return stream ? ((const struct lstream *)stream)->s : (cudaStream_t)0;
}

static int dev_of(const void *stream)
{
	return stream ? ((const struct lstream *)stream)->dev : -1;
}

/* --- ops ----------------------------------------------------------------------------------- */

static void resolve_driver(void)
{
	/* libcudart has loaded the driver by now; take a reference without loading anything. */
	void *h = dlopen("libcuda.so.1", RTLD_NOW | RTLD_LOCAL | RTLD_NOLOAD);
	if (!h)
		return;
	void *get = dlsym(h, "cuCtxGetCurrent");
	void *set = dlsym(h, "cuCtxSetCurrent");
	if (get && set) {
		memcpy(&p_ctx_get, &get, sizeof get);
		memcpy(&p_ctx_set, &set, sizeof set);
		void *cd = dlsym(h, "cuCtxGetDevice"), *sc = dlsym(h, "cuStreamGetCtx");
		if (cd && sc) {
			memcpy(&p_ctx_dev, &cd, sizeof cd);
			memcpy(&p_stream_ctx, &sc, sizeof sc);
		}
	}
	void *ps = dlsym(h, "cuDevicePrimaryCtxGetState");
	memcpy(&p_primary_state, &ps, sizeof ps);
	void *wv = dlsym(h, "cuStreamWaitValue32_v2");
	if (!wv)
		wv = dlsym(h, "cuStreamWaitValue32");
	memcpy(&p_wait_value, &wv, sizeof wv);
	/* The handle is kept: the module is never unloaded (-z nodelete). */
}

/* Resolves every function of RT_FUNCS from h; 0 when one is missing. */
static int rt_resolve(void *h)
{
#define RT_SYM(f)                                                                                 \
	{                                                                                         \
		void *sym = dlsym(h, #f);                                                         \
		if (!sym)                                                                         \
			return 0;                                                                 \
		memcpy(&p_##f, &sym, sizeof sym);                                                 \
	}
	RT_FUNCS(RT_SYM)
	void *sym = dlsym(h, "cudaStreamGetDevice");
	memcpy(&p_cudaStreamGetDevice, &sym, sizeof sym);
	return 1;
}

/* Devices the runtime h sees (negative: its error, already reported). */
static int rt_try(void *h, const char *name)
{
	if (!rt_resolve(h))
		return report(CKPT_E_UNSUPPORTED, "runtime lacks a function the provider needs");
	snprintf(g_rt_name, sizeof g_rt_name, "%s", name);
	int n = 0;
	int rc = CU(cudaGetDeviceCount, &n);
	return rc ? rc : n;
}

/* Loads the CUDA runtime: CKPT_CUDART names one; otherwise one already loaded in the process is
 * used (a second runtime beside torch's would be another CUDA state), else the newest of the list
 * that finds a device (a CUDA 13 runtime on a CUDA 12 driver answers "insufficient driver"; the
 * CUDA 12 one then works). Returns the device count or a negative error. */
static int rt_load(void)
{
	static const char *const names[] = { "libcudart.so.13", "libcudart.so.12" };
	const size_t nn = sizeof names / sizeof names[0];
	const char *env = getenv("CKPT_CUDART");
	if (env && *env) {
		g_rt = dlopen(env, RTLD_NOW | RTLD_LOCAL);
		if (!g_rt)
			return report(CKPT_E_UNSUPPORTED, dlerror());
		return rt_try(g_rt, env);
	}
	int rc = report(CKPT_E_UNSUPPORTED, "no CUDA runtime (libcudart.so.13 or .12) found");
	/* Pass 0: runtimes already in the process; pass 1: load them. */
	for (size_t k = 0; k < 2 * nn; k++) {
		void *h = dlopen(names[k % nn], RTLD_NOW | RTLD_LOCAL | (k < nn ? RTLD_NOLOAD : 0));
		if (!h)
			continue;
		rc = rt_try(h, names[k % nn]);
		if (rc > 0) {
			g_rt = h;
			return rc;
		}
		/* Kept loaded: a runtime may not survive dlclose once it has touched the driver. */
	}
	return rc;
}

static int cu_init(fail_fn fail)
{
	g_fail = fail;
	int n = rt_load();
	if (n > 0)
		resolve_driver();
	return n;
}

static int cu_alloc_pinned(size_t size, void **out)
{
	*out = NULL;
	if (size == 0)
		return report(CKPT_E_INVAL, "cudaHostAlloc: size 0");
	struct devguard g;
	int rc = dev_enter(host_op_dev(), &g);
	if (rc)
		return rc;
	void *p = NULL;
	/* Mapped: the fence's flag (wait_flag) is read by the device. */
	rc = CU(cudaHostAlloc, &p, size, cudaHostAllocPortable | cudaHostAllocMapped);
	if (!rc && ((uintptr_t)p & 4095u)) {
		(void)cudaFreeHost(p);
		rc = report(CKPT_E_IO, "cudaHostAlloc: memory not 4 KiB aligned");
	}
	dev_leave(&g);
	if (!rc)
		*out = p;
	return rc;
}

static void cu_free_pinned(void *p, size_t size)
{
	(void)size;
	if (!p)
		return;
	struct devguard g;
	if (dev_enter(host_op_dev(), &g))
		return;
	/* Fails only at process exit once the runtime is unloading; nothing to do then. */
	if (cudaFreeHost(p) != cudaSuccess)
		(void)cudaGetLastError();
	dev_leave(&g);
}

static int cu_stream_create(int dev, void **stream)
{
	*stream = NULL;
	if (dev < 0)
		return 0; /* host memory: no stream, as in the host provider */
	struct lstream *ls = calloc(1, sizeof *ls);
	if (!ls)
		return report(CKPT_E_NOMEM, "stream: out of memory");
	struct devguard g;
	int rc = dev_enter(dev, &g);
	if (rc) {
		free(ls);
		return rc;
	}
	rc = CU(cudaStreamCreateWithFlags, &ls->s, cudaStreamNonBlocking);
	dev_leave(&g);
	if (rc) {
		free(ls);
		return rc;
	}
	ls->dev = dev;
	int none = -1;
	__atomic_compare_exchange_n(&g_home_dev, &none, dev, 0, __ATOMIC_RELAXED, __ATOMIC_RELAXED);
	*stream = ls;
	return 0;
}

static void cu_stream_destroy(void *stream)
{
	struct lstream *ls = stream;
	if (!ls)
		return;
	struct devguard g;
	if (!dev_enter(ls->dev, &g)) {
		if (cudaStreamDestroy(ls->s) != cudaSuccess)
			(void)cudaGetLastError();
		dev_leave(&g);
	}
	free(ls);
}

/* The device of stream through the driver (cuStreamGetCtx), or -1. The thread's current
 * context is restored, also when there was none. */
static int stream_ctx_dev(void *stream)
{
	void *sctx = NULL, *cur = NULL;
	int d = -1;
	if (!p_stream_ctx || !p_ctx_dev || p_stream_ctx(stream, &sctx) || !sctx ||
	    p_ctx_get(&cur))
		return -1;
	if (sctx == cur)
		return p_ctx_dev(&d) ? -1 : d;
	if (p_ctx_set(sctx))
		return -1;
	if (p_ctx_dev(&d))
		d = -1;
	(void)p_ctx_set(cur);
	return d;
}

/* Device of a user stream (the lib stream's device when it cannot be told, or for NULL). */
static int user_dev(void *user_stream, int fallback)
{
	int d = -1;
	if (user_stream && p_cudaStreamGetDevice) {
		if (p_cudaStreamGetDevice((cudaStream_t)user_stream, &d) == cudaSuccess && d >= 0)
			return d;
		(void)cudaGetLastError();
	}
	/* Without cudaStreamGetDevice (runtimes before 12.8) the driver tells: the stream's
	 * context, made current for a moment, names its device. Guessing the calling thread's
	 * current device put the fence's and the ordering's events on the wrong device when one
	 * process holds tensors on several. */
	if (user_stream && (d = stream_ctx_dev(user_stream)) >= 0)
		return d;
	void *ctx;
	if (user_stream && p_ctx_get && thread_has_ctx(&ctx) && cudaGetDevice(&d) == cudaSuccess)
		return d;
	return fallback;
}

/* The copies on lib_stream wait for what is queued so far on user_stream. */
static int cu_stream_after(void *lib_stream, void *user_stream)
{
	int ldev = dev_of(lib_stream);
	/* The event must belong to the device of the stream it is recorded on. */
	int udev = user_dev(user_stream, ldev);
	struct devguard g;
	int rc = dev_enter(udev, &g);
	if (rc)
		return rc;
	cudaEvent_t ev;
	rc = CU(cudaEventCreateWithFlags, &ev, cudaEventDisableTiming);
	if (!rc) {
		rc = CU(cudaEventRecord, ev, (cudaStream_t)user_stream);
		if (!rc)
			rc = CU(cudaStreamWaitEvent, raw(lib_stream), ev, 0);
		/* Released once the recorded work completes; the wait above is already captured. */
		(void)cudaEventDestroy(ev);
	}
	dev_leave(&g);
	return rc;
}

/* lib_stream waits for what is queued so far on other, another library stream. */
static int cu_stream_join(void *lib_stream, void *other)
{
	struct devguard g;
	int rc = dev_enter(dev_of(other), &g); /* the event belongs to other's device */
	if (rc)
		return rc;
	cudaEvent_t ev;
	rc = CU(cudaEventCreateWithFlags, &ev, cudaEventDisableTiming);
	if (!rc) {
		rc = CU(cudaEventRecord, ev, raw(other));
		if (!rc)
			rc = CU(cudaStreamWaitEvent, raw(lib_stream), ev, 0);
		(void)cudaEventDestroy(ev);
	}
	dev_leave(&g);
	return rc;
}

static int copy(void *dst, const void *src, size_t n, void *stream, enum cudaMemcpyKind kind)
{
	if (n == 0)
		return 0;
	struct devguard g;
	int rc = dev_enter(dev_of(stream), &g);
	if (rc)
		return rc;
	rc = CU(cudaMemcpyAsync, dst, src, n, kind, raw(stream));
	dev_leave(&g);
	return rc;
}

static int cu_copy_d2h(void *dst, const void *src, size_t n, void *stream)
{
	return copy(dst, src, n, stream, cudaMemcpyDeviceToHost);
}

static int cu_copy_h2d(void *dst, const void *src, size_t n, void *stream)
{
	return copy(dst, src, n, stream, cudaMemcpyHostToDevice);
}

static int cu_stream_sync(void *stream)
{
	struct devguard g;
	int rc = dev_enter(dev_of(stream), &g);
	if (rc)
		return rc;
	rc = CU(cudaStreamSynchronize, raw(stream));
	dev_leave(&g);
	return rc;
}

/* A device whose primary context exists (the home device first), or -1 when none does. */
static int active_dev(void)
{
	int home = __atomic_load_n(&g_home_dev, __ATOMIC_RELAXED), n = 0;
	unsigned fl;
	int on = 0;
	if (!p_primary_state)
		return home >= 0 ? home : 0;
	if (home >= 0 && p_primary_state(home, &fl, &on) == 0 && on)
		return home;
	if (cudaGetDeviceCount(&n) != cudaSuccess) {
		(void)cudaGetLastError();
		return -1;
	}
	for (int d = 0; d < n; d++)
		if (p_primary_state(d, &fl, &on) == 0 && on)
			return d;
	return -1;
}

static int cu_mem_device(const void *p)
{
	if (!p)
		return -1;
	/* The runtime's query creates a context on the current device (device 0) on a thread
	 * without one, in a process that may use another GPU only. Such a thread
	 * borrows a context that exists; where none does, no device memory can either. */
	void *ctx;
	struct devguard g = {0};
	if (!thread_has_ctx(&ctx)) {
		int d = active_dev();
		if (d < 0 || dev_enter(d, &g))
			return -1;
	}
	struct cudaPointerAttributes a;
	memset(&a, 0, sizeof a);
	int d = -1;
	if (cudaPointerGetAttributes(&a, p) != cudaSuccess)
		(void)cudaGetLastError(); /* older runtimes fail for ordinary host memory */
	else if (a.type == cudaMemoryTypeDevice || a.type == cudaMemoryTypeManaged)
		d = a.device;
	dev_leave(&g);
	return d;
}

static int cu_host_register(void *p, size_t size)
{
	struct devguard g;
	int rc = dev_enter(host_op_dev(), &g);
	if (rc)
		return rc;
	rc = CU(cudaHostRegister, p, size, cudaHostRegisterPortable);
	dev_leave(&g);
	return rc;
}

static void cu_host_unregister(void *p)
{
	struct devguard g;
	if (dev_enter(host_op_dev(), &g))
		return;
	if (cudaHostUnregister(p) != cudaSuccess)
		(void)cudaGetLastError();
	dev_leave(&g);
}

/* Without stream memory operations there is no way to make the stream wait on the device for
 * a flag set later: a host function holding the stream would park one of CUDA's callback
 * threads, which CUDA may share among streams (the trainer's own host functions would wait
 * behind it). -CKPT_E_UNSUPPORTED then tells the caller to wait on its thread. */
static int cu_wait_flag(void *user_stream, int dev, const uint32_t *flag, uint32_t value)
{
	if (!p_wait_value)
		return -CKPT_E_UNSUPPORTED;
	struct devguard g;
	int rc = dev_enter(user_dev(user_stream, dev), &g);
	if (rc)
		return rc;
	void *dptr = NULL;
	rc = CU(cudaHostGetDevicePointer, &dptr, (void *)flag, 0);
	/* CU_STREAM_WAIT_VALUE_GEQ is 0. */
	if (!rc && p_wait_value(user_stream, (uintptr_t)dptr, value, 0) != 0)
		rc = -CKPT_E_UNSUPPORTED; /* refused (memory operations disabled on this device) */
	dev_leave(&g);
	return rc;
}

struct lmark {
	cudaEvent_t ev;
	int dev;
};

static int cu_mark(void *stream, void **out)
{
	*out = NULL;
	struct lmark *m = malloc(sizeof *m);
	if (!m)
		return report(CKPT_E_NOMEM, "event: out of memory");
	m->dev = dev_of(stream);
	struct devguard g;
	int rc = dev_enter(m->dev, &g);
	if (rc) {
		free(m);
		return rc;
	}
	rc = CU(cudaEventCreateWithFlags, &m->ev, cudaEventDisableTiming | cudaEventBlockingSync);
	if (!rc && (rc = CU(cudaEventRecord, m->ev, raw(stream))))
		(void)cudaEventDestroy(m->ev);
	dev_leave(&g);
	if (rc)
		free(m);
	else
		*out = m;
	return rc;
}

static int cu_mark_wait(void *mark)
{
	struct lmark *m = mark;
	struct devguard g;
	int rc = dev_enter(m->dev, &g);
	if (!rc) {
		rc = CU(cudaEventSynchronize, m->ev);
		(void)cudaEventDestroy(m->ev);
		dev_leave(&g);
	}
	free(m);
	return rc;
}

static const struct ckpt_gpu_ops cuda_ops = {
	.abi = CKPT_GPU_ABI,
	.name = "cuda",
	.init = cu_init,
	.alloc_pinned = cu_alloc_pinned,
	.free_pinned = cu_free_pinned,
	.stream_create = cu_stream_create,
	.stream_destroy = cu_stream_destroy,
	.stream_after = cu_stream_after,
	.stream_join = cu_stream_join,
	.copy_d2h = cu_copy_d2h,
	.copy_h2d = cu_copy_h2d,
	.stream_sync = cu_stream_sync,
	.mem_device = cu_mem_device,
	.host_register = cu_host_register,
	.host_unregister = cu_host_unregister,
	.wait_flag = cu_wait_flag,
	.mark = cu_mark,
	.mark_wait = cu_mark_wait,
};

EXPORT const struct ckpt_gpu_ops *ckpt_gpu_module_ops(void);
EXPORT const struct ckpt_gpu_ops *ckpt_gpu_module_ops(void)
{
	return &cuda_ops;
}
