/* The host provider, and the loader of the CUDA module. */
#include "gpu/gpu.h"

#include <dlfcn.h>
#include <errno.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/mman.h>

#include "common/common.h"

static int host_init(int (*fail)(int, const char *, ...))
{
	return 0;
}

static int host_alloc(size_t size, void **out)
{
	void *p = ckpt_aligned_alloc(size);
	if (!p)
		return ckpt_fail(CKPT_E_NOMEM, "staging pool: cannot allocate %zu bytes", size);
	/* Best effort: locked pages cannot be swapped out mid-save; without CAP_IPC_LOCK or a large
	 * RLIMIT_MEMLOCK this fails and the memory stays ordinary. */
	(void)mlock(p, size);
	*out = p;
	return 0;
}

static void host_free(void *p, size_t size)
{
	if (!p)
		return;
	munlock(p, size);
	free(p);
}

static int host_unsupported(void)
{
	return ckpt_fail(CKPT_E_UNSUPPORTED, "CUDA memory: %s", ckpt_gpu_cuda_error());
}
static int host_stream_create(int dev, void **s) { *s = NULL; return dev < 0 ? 0 : host_unsupported(); }
static void host_stream_destroy(void *s) { (void)s; }
static int host_after(void *a, void *b) { return 0; }
static int host_join(void *a, void *b) { return 0; }
static int host_copy(void *dst, const void *src, size_t n, void *stream)
{
	memcpy(dst, src, n);
	return 0;
}
static int host_sync(void *s) { return 0; }
static int host_mem_device(const void *p) { return -1; }
static int host_register(void *p, size_t size) { return 0; }
static void host_unregister(void *p) { (void)p; }
static int host_mark(void *s, void **m) { *m = NULL; return 0; }
static int host_mark_wait(void *m) { return 0; }
static int host_wait_flag(void *s, int dev, const uint32_t *flag, uint32_t v)
{
	return host_unsupported();
}

static const struct ckpt_gpu_ops host_ops = {
	.abi = CKPT_GPU_ABI, .name = "host", .init = host_init, .alloc_pinned = host_alloc,
	.free_pinned = host_free, .stream_create = host_stream_create,
	.stream_destroy = host_stream_destroy, .stream_after = host_after, .stream_join = host_join,
	.copy_d2h = host_copy, .copy_h2d = host_copy, .stream_sync = host_sync,
	.mem_device = host_mem_device, .host_register = host_register,
	.host_unregister = host_unregister, .wait_flag = host_wait_flag, .mark = host_mark,
	.mark_wait = host_mark_wait,
};

const struct ckpt_gpu_ops *ckpt_gpu_host(void)
{
	return &host_ops;
}

static pthread_once_t once = PTHREAD_ONCE_INIT;
static const struct ckpt_gpu_ops *cuda_ops;
static int cuda_devices;
static char cuda_err[512] = "not loaded";

static int module_fail(int err, const char *fmt, ...)
{
	char buf[900];
	va_list ap;
	va_start(ap, fmt);
	vsnprintf(buf, sizeof buf, fmt, ap);
	va_end(ap);
	return ckpt_fail(err, "%s", buf);
}

/* The module is looked for beside libckpt.so first (build tree and install), then on the default
 * search path; CKPT_CUDA_MODULE names it explicitly, CKPT_CUDA_MODULE=none disables it. */
static void load_module(void)
{
	const char *env = getenv("CKPT_CUDA_MODULE");
	if (env && !strcmp(env, "none")) {
		snprintf(cuda_err, sizeof cuda_err, "disabled by CKPT_CUDA_MODULE=none");
		return;
	}
	void *h = NULL;
	char path[4096];
	if (env && *env) {
		h = dlopen(env, RTLD_NOW | RTLD_LOCAL);
	} else {
		Dl_info info;
		if (dladdr((void *)ckpt_gpu_host, &info) && info.dli_fname) {
			snprintf(path, sizeof path, "%s", info.dli_fname);
			char *slash = strrchr(path, '/');
			if (slash) {
				snprintf(slash + 1, sizeof path - (size_t)(slash + 1 - path), "%s",
					 CKPT_GPU_MODULE);
				h = dlopen(path, RTLD_NOW | RTLD_LOCAL);
			}
		}
		if (!h)
			h = dlopen(CKPT_GPU_MODULE, RTLD_NOW | RTLD_LOCAL);
	}
	if (!h) {
		const char *e = dlerror();
		snprintf(cuda_err, sizeof cuda_err, "CUDA module not loaded (%s)", e ? e : "not found");
		return;
	}
	const struct ckpt_gpu_ops *(*entry)(void) =
		(const struct ckpt_gpu_ops *(*)(void))dlsym(h, CKPT_GPU_ENTRY);
	const struct ckpt_gpu_ops *ops = entry ? entry() : NULL;
	if (!ops || ops->abi != CKPT_GPU_ABI) {
		snprintf(cuda_err, sizeof cuda_err, "CUDA module has no entry point or another ABI");
		dlclose(h);
		return;
	}
	int n = ops->init(module_fail);
	if (n <= 0) {
		snprintf(cuda_err, sizeof cuda_err, "no CUDA device (%s)",
			 n < 0 ? ckpt_errmsg() : "0 devices");
		dlclose(h);
		return;
	}
	cuda_err[0] = 0;
	cuda_devices = n;
	cuda_ops = ops;
}

static void load(void)
{
	/* Loading must not clobber the caller's last error message. */
	char saved[1024];
	snprintf(saved, sizeof saved, "%s", ckpt_errmsg());
	load_module();
	ckpt_fail(0, "%s", saved);
}

const struct ckpt_gpu_ops *ckpt_gpu_cuda(void)
{
	pthread_once(&once, load);
	return cuda_ops;
}

const char *ckpt_gpu_cuda_error(void)
{
	pthread_once(&once, load);
	return cuda_err;
}

CKPT_API int ckpt_mem_supported(int mem)
{
	if (mem == CKPT_MEM_HOST)
		return 1;
	return mem >= 0 && mem < 16 && ckpt_gpu_cuda() && mem < cuda_devices;
}

int ckpt_gpu_check_mem(int mem, const void *p, const char *what, const char *name)
{
	if (!p)
		return 0;
	const struct ckpt_gpu_ops *g = NULL;
	if (mem != CKPT_MEM_HOST) {
		g = ckpt_gpu_cuda();
	} else {
		void *drv = dlopen("libcuda.so.1", RTLD_NOW | RTLD_LOCAL | RTLD_NOLOAD);
		if (drv) {
			dlclose(drv);
			g = ckpt_gpu_cuda();
		}
	}
	if (!g)
		return 0;
	int d = g->mem_device(p);
	if (d == mem || (d < 0 && mem == CKPT_MEM_HOST))
		return 0;
	if (d < 0)
		return ckpt_fail(CKPT_E_INVAL, "%s '%s': declared on CUDA device %d, but %p is host memory",
				 what, name, mem, p);
	if (mem == CKPT_MEM_HOST)
		return ckpt_fail(CKPT_E_INVAL, "%s '%s': declared as host memory, but %p is on CUDA device %d",
				 what, name, p, d);
	return ckpt_fail(CKPT_E_INVAL, "%s '%s': declared on CUDA device %d, but %p is on CUDA device %d",
			 what, name, mem, p, d);
}
