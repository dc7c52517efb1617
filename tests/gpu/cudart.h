/* The CUDA runtime for GPU tests and benchmarks, loaded with dlopen like the provider does
 * (CKPT_CUDART, else libcudart.so.13, else libcudart.so.12), so that one binary runs against the
 * CUDA test double (tests/cudadouble, through LD_LIBRARY_PATH), a CUDA 12 or a CUDA 13 runtime.
 * Include after <cuda_runtime_api.h>; call cudart_load() first. The ordinary names below then go
 * through the loaded library. Header-only: each program includes it once. */
#ifndef CKPT_TESTS_CUDART_H
#define CKPT_TESTS_CUDART_H

#include <dlfcn.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define CUDART_FUNCS(X)                                                                           \
	X(cudaGetDeviceCount) X(cudaSetDevice) X(cudaGetDevice) X(cudaMalloc) X(cudaFree)         \
	X(cudaMemcpy) X(cudaMemcpyAsync) X(cudaMemset) X(cudaMemsetAsync) X(cudaHostAlloc)        \
	X(cudaFreeHost) X(cudaStreamCreateWithFlags) X(cudaStreamDestroy)                         \
	X(cudaStreamSynchronize) X(cudaDeviceSynchronize) X(cudaGetErrorString)                   \
	X(cudaLaunchHostFunc) X(cudaRuntimeGetVersion) X(cudaEventCreateWithFlags)                \
	X(cudaEventRecord) X(cudaEventDestroy) X(cudaEventQuery) X(cudaStreamWaitEvent)
#define CUDART_DECL(f) static __typeof__(f) *t_##f;
CUDART_FUNCS(CUDART_DECL)
static void *t_cudart;
static const char *t_cudart_name;

/* Resolves every function of CUDART_FUNCS from t_cudart; 0 or -1. */
static int cudart_resolve(void)
{
#define CUDART_SYM(f)                                                                             \
	{                                                                                         \
		void *s_ = dlsym(t_cudart, #f);                                                   \
		if (!s_) {                                                                        \
			fprintf(stderr, "%s: no %s\n", t_cudart_name, #f);                        \
			return -1;                                                                \
		}                                                                                 \
		memcpy(&t_##f, &s_, sizeof s_);                                                   \
	}
	CUDART_FUNCS(CUDART_SYM)
	return 0;
}

/* 0 when a runtime was loaded, -1 (with a line on stderr) otherwise. Like the provider, takes the
 * newest runtime that sees a device (a CUDA 13 runtime on a CUDA 12 driver sees none). */
static int cudart_load(void)
{
	static const char *const names[] = { "libcudart.so.13", "libcudart.so.12" };
	/* CKPT_TEST_CUDART: this program's runtime only (a torch-cu12 process, say); CKPT_CUDART:
	 * the provider's too. */
	const char *env = getenv("CKPT_TEST_CUDART");
	if (!env || !*env)
		env = getenv("CKPT_CUDART");
	void *first = NULL;
	const char *first_name = NULL;
	for (size_t i = 0; i < 2; i++) {
		const char *name = env && *env ? env : names[i];
		void *h = dlopen(name, RTLD_NOW | RTLD_LOCAL);
		if (h) {
			t_cudart = h;
			t_cudart_name = name;
			int n = 0;
			if (!cudart_resolve() && t_cudaGetDeviceCount(&n) == cudaSuccess && n > 0)
				return 0;
			if (!first) {
				first = h;
				first_name = name;
			}
		}
		if (env && *env)
			break;
	}
	if (!first) {
		fprintf(stderr, "no CUDA runtime: %s\n", dlerror());
		return -1;
	}
	/* A runtime without a device: the caller finds no device and skips. */
	t_cudart = first;
	t_cudart_name = first_name;
	return cudart_resolve();
}

#define cudaGetDeviceCount t_cudaGetDeviceCount
#define cudaSetDevice t_cudaSetDevice
#define cudaGetDevice t_cudaGetDevice
#define cudaMalloc t_cudaMalloc
#define cudaFree t_cudaFree
#define cudaMemcpy t_cudaMemcpy
#define cudaMemcpyAsync t_cudaMemcpyAsync
#define cudaMemset t_cudaMemset
#define cudaMemsetAsync t_cudaMemsetAsync
#define cudaHostAlloc t_cudaHostAlloc
#define cudaFreeHost t_cudaFreeHost
#define cudaStreamCreateWithFlags t_cudaStreamCreateWithFlags
#define cudaStreamDestroy t_cudaStreamDestroy
#define cudaStreamSynchronize t_cudaStreamSynchronize
#define cudaDeviceSynchronize t_cudaDeviceSynchronize
#define cudaGetErrorString t_cudaGetErrorString
#define cudaLaunchHostFunc t_cudaLaunchHostFunc
#define cudaRuntimeGetVersion t_cudaRuntimeGetVersion
#define cudaEventCreateWithFlags t_cudaEventCreateWithFlags
#define cudaEventRecord t_cudaEventRecord
#define cudaEventDestroy t_cudaEventDestroy
#define cudaEventQuery t_cudaEventQuery
#define cudaStreamWaitEvent t_cudaStreamWaitEvent

/* Whether a context exists on device d: the double's record, else the driver's primary context
 * state; -1 when neither can tell. */
static inline int cuda_ctx_active(int d)
{
	unsigned (*mask)(void);
	void *s = t_cudart ? dlsym(t_cudart, "cudadouble_ctx_mask") : NULL;
	if (s) {
		memcpy(&mask, &s, sizeof s);
		return !!(mask() & (1u << d));
	}
	void *drv = dlopen("libcuda.so.1", RTLD_NOW | RTLD_NOLOAD);
	int (*st)(int, unsigned *, int *);
	s = drv ? dlsym(drv, "cuDevicePrimaryCtxGetState") : NULL;
	if (!s)
		return -1;
	memcpy(&st, &s, sizeof s);
	unsigned fl;
	int active = 0;
	return st(d, &fl, &active) == 0 ? active : -1;
}

#endif
