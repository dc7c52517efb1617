/* Test-only entry points of the CUDA test double (tests/cudadouble). Tests look them up with
 * dlsym(RTLD_DEFAULT, ...): against the real CUDA runtime they are absent and the checks that need
 * them use the driver (cuDevicePrimaryCtxGetState) or are skipped. */
#ifndef CUDADOUBLE_H
#define CUDADOUBLE_H

/* Devices the double simulates (CUDADOUBLE_DEVICES, default 2). */
int cudadouble_device_count(void);
/* Driver version it answers (CUDADOUBLE_DRIVER, default 13000). */
int cudadouble_driver_version(void);
/* Called by each runtime stub when it is loaded; cudadouble_runtimes() counts them. */
void cudadouble_runtime_loaded(int version);
int cudadouble_runtimes(void);
/* Bit d set: a context was created on device d. */
unsigned cudadouble_ctx_mask(void);
/* The nth call of the API function `name` ("*": of any) from now fails (nth < 0: never). */
void cudadouble_fail(const char *name, long nth);
/* The nth asynchronous copy (cudaMemcpyAsync) from now fails on the device: the error is
 * sticky (every later call returns cudaErrorLaunchFailure), as a corrupted context on CUDA. */
void cudadouble_fail_async(long nth);
/* Calls counted by the injector since the last cudadouble_fail(). */
long cudadouble_calls(void);
/* Device of a stream (0: the legacy stream of the calling thread's device). */
int cudadouble_stream_device(void *stream);

/* cudaHostAlloc calls so far; copies (async or not) that had a pageable host side. */
long cudadouble_host_allocs(void);
/* The most copies queued on one stream and not yet run since the last call (then reset). */
long cudadouble_max_copies_in_flight(void);
/* cudaFreeHost calls so far (each synchronizes the whole device). */
long cudadouble_host_frees(void);
long cudadouble_pageable_copies(void);
/* cudaLaunchHostFunc calls so far. */
long cudadouble_host_funcs(void);
/* cudaStreamSynchronize calls so far. */
long cudadouble_stream_syncs(void);

#endif
