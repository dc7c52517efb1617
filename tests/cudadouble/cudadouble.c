/* A CUDA test double: the part of the CUDA runtime and driver API that libckpt's provider and its
 * tests call, behaving like a GPU where it matters, so that the CUDA path runs in every
 * `make check` on machines without a GPU.
 *
 * Built as build/tests/lib/libcuda.so.1 (this file: all state, the driver calls and most runtime
 * calls) plus two thin runtimes, libcudart.so.13 and libcudart.so.12 (cudart_stub.c), that need
 * it, as the real libcudart needs the driver. Selected only through LD_LIBRARY_PATH.
 *
 * What it models:
 * - Devices (CUDADOUBLE_DEVICES, default 2). Device memory is a PROT_NONE shadow mapping (the
 *   address handed out) plus a backing mapping that only stream threads touch: a host memcpy into
 *   or out of device memory segfaults, as on a GPU.
 * - Per-thread current device and per-device primary contexts: a context is created (and
 *   recorded: cudadouble_ctx_mask, cuDevicePrimaryCtxGetState) by cudaSetDevice or by any call
 *   that needs one on a thread without one (which then gets device 0, as CUDA does).
 * - Streams run on their own threads, in order, and lazily: work runs only when something needs
 *   it (a synchronize, an event query or wait, a stream waiting on it, a host function queued
 *   behind it, a copy to pageable memory). A missing wait therefore shows up as wrong data every
 *   time, not by chance. CUDADOUBLE_EAGER=1 runs work as soon as it is queued.
 * - The legacy default stream (0) synchronizes with the device's blocking streams;
 *   cudaStreamPerThread is each thread's own (blocking) stream, not the legacy one.
 * - Events, stream-wait-event, host functions, cuStreamWaitValue32 on host memory. An event
 *   belongs to the device current at its creation: recording it on another device's stream
 *   fails (cudaErrorInvalidResourceHandle), as on CUDA. cuStreamGetCtx, cuCtxGetDevice.
 * - Host functions run one at a time, whatever their stream (CUDA may run them all on one thread),
 *   and may not call CUDA (cudaErrorNotPermitted). CUDADOUBLE_NO_MEMOPS=1: cuStreamWaitValue32
 *   answers CUDA_ERROR_NOT_SUPPORTED (stream memory operations disabled).
 * - Pinned (cudaHostAlloc) vs pageable host memory; mapped (cudaHostAllocMapped,
 *   cudaHostRegisterMapped) vs not: only mapped memory has a device pointer or may be waited on
 *   by cuStreamWaitValue32.
 * - Pinned vs pageable: a copy with pageable memory is synchronous.
 * - Asynchronous, sticky errors: cudadouble_fail_async(N) makes the Nth asynchronous copy from
 *   then fail on the device; from then every call returns cudaErrorLaunchFailure, and so do the
 *   waits (stream, event, device synchronize) running when it happened.
 * - Error injection: CUDADOUBLE_FAIL=NAME:N (the Nth call of NAME, or of any call when NAME is
 *   "*", fails with cudaErrorMemoryAllocation, or CUDADOUBLE_FAIL_ERR).
 * - Driver version CUDADOUBLE_DRIVER (default 13000); the runtime stubs refuse a newer runtime
 *   with cudaErrorInsufficientDriver. */
#include <cuda_runtime_api.h>

#include <errno.h>
#include <pthread.h>
#include <sched.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#include "cudadouble.h"

#define API __attribute__((visibility("default")))
#define MAXDEV 8

/* --- state ------------------------------------------------------------------------------- */

enum opkind { OP_COPY, OP_SET, OP_HOSTFN, OP_WAIT, OP_WAITVAL };

struct dstream;

struct op {
	enum opkind kind;
	int fail;          /* OP_COPY: fails when run (cudadouble_fail_async) */
	void *dst;
	const void *src;
	size_t n;
	int val;
	void (*fn)(void *);
	void *arg;
	struct dstream *on; /* OP_WAIT: the stream waited for, up to seq */
	uint64_t seq;
	volatile uint32_t *addr; /* OP_WAITVAL */
	struct op *next;
};

struct dstream {
	int dev;
	int blocking;      /* synchronizes with the legacy stream */
	int legacy;
	int destroyed;
	uint64_t queued, done, demanded;
	long copies;          /* copies queued and not yet run (mu) */
	struct op *head, *tail;
	pthread_t thr;
	struct dstream *next_all;
};

struct devmem {
	char *shadow, *backing;
	size_t size, map;
	int dev;
	struct devmem *next;
};

struct pinned {
	char *p;
	size_t size;
	int owned; /* cudaHostAlloc (1) or cudaHostRegister (0) */
	int mapped; /* cudaHostAllocMapped / cudaHostRegisterMapped: the device may address it */
	struct pinned *next;
};

struct devent {
	struct dstream *s;
	uint64_t seq;
	int dev; /* the device current when it was created: it may be recorded on its streams only */
};

static pthread_mutex_t mu = PTHREAD_MUTEX_INITIALIZER;
static pthread_mutex_t hostfn_mu = PTHREAD_MUTEX_INITIALIZER; /* host functions run one at a time */
static long host_funcs;  /* cudaLaunchHostFunc calls (atomic) */
static int no_memops;    /* CUDADOUBLE_NO_MEMOPS=1: cuStreamWaitValue32 is not supported */
static pthread_cond_t cv = PTHREAD_COND_INITIALIZER;
static struct dstream *streams; /* every stream ever created (kept: events may name them) */
static struct dstream *legacy[MAXDEV];
static struct devmem *mems;
static struct pinned *pins;
static unsigned ctx_mask;
static int ndev = -1, eager, driver_version = 13000, runtimes_loaded;
static char fail_name[64];
static long fail_at = -1, fail_count;
static int fail_err = cudaErrorMemoryAllocation;
static char ctx_objs[MAXDEV];
static long host_allocs, host_frees, pageable_copies, stream_syncs;
static long max_copies; /* the most copies queued on one stream, not yet run (mu) */ /* the CUcontext of device d is &ctx_objs[d] */

static __thread int cur_dev = -1; /* -1: no current context */
static __thread cudaError_t last_err;

static void init_once(void)
{
	const char *e = getenv("CUDADOUBLE_DEVICES");
	ndev = e ? atoi(e) : 2;
	if (ndev < 0 || ndev > MAXDEV)
		ndev = 2;
	e = getenv("CUDADOUBLE_EAGER");
	eager = e && *e == '1';
	e = getenv("CUDADOUBLE_DRIVER");
	if (e)
		driver_version = atoi(e);
	e = getenv("CUDADOUBLE_FAIL");
	const char *colon = e ? strchr(e, ':') : NULL;
	if (colon && (size_t)(colon - e) < sizeof fail_name) {
		memcpy(fail_name, e, (size_t)(colon - e));
		fail_at = atol(colon + 1);
	}
	e = getenv("CUDADOUBLE_NO_MEMOPS");
	no_memops = e && *e == '1';
	e = getenv("CUDADOUBLE_FAIL_ERR");
	if (e)
		fail_err = atoi(e);
}

static pthread_once_t once = PTHREAD_ONCE_INIT;

static cudaError_t ret(cudaError_t e)
{
	if (e != cudaSuccess)
		last_err = e;
	return e;
}

/* Every API entry starts with ENTER: initializes and counts the call for error injection. */
static int injected(const char *name)
{
	pthread_once(&once, init_once);
	if (fail_at < 0)
		return 0;
	if (strcmp(fail_name, "*") && strcmp(fail_name, name))
		return 0;
	return __atomic_add_fetch(&fail_count, 1, __ATOMIC_SEQ_CST) == fail_at;
}
/* A host function may not call CUDA (the runtime refuses with cudaErrorNotPermitted). */
static __thread int in_hostfn;
/* An asynchronous error (a copy that failed on the device, cudadouble_fail_async): sticky, as a
 * corrupted context is on CUDA: every later call returns it, and so do the waits that were
 * running when it happened. 0 while none. */
static int sticky_err;
static long async_fail_at = -1, async_count;
#define ENTER()                                                                                   \
	do {                                                                                      \
		if (in_hostfn)                                                                    \
			return ret(cudaErrorNotPermitted);                                        \
		if (__atomic_load_n(&sticky_err, __ATOMIC_SEQ_CST))                               \
			return ret((cudaError_t)sticky_err);                                      \
		if (injected(__func__))                                                           \
			return ret((cudaError_t)fail_err);                                        \
	} while (0)

/* A wait's result: the sticky error when one happened meanwhile. */
static cudaError_t after_wait(void)
{
	int e = __atomic_load_n(&sticky_err, __ATOMIC_SEQ_CST);
	return e ? ret((cudaError_t)e) : cudaSuccess;
}

/* The calling thread needs a context: it gets device 0 when it has none. */
static int ctx_dev(void)
{
	if (cur_dev < 0)
		cur_dev = 0;
	__atomic_or_fetch(&ctx_mask, 1u << cur_dev, __ATOMIC_SEQ_CST);
	return cur_dev;
}

/* --- memory ------------------------------------------------------------------------------ */

/* Device memory holding [p, p+n), or NULL; *off is p's offset in it. Lock held. */
static struct devmem *find_dev(const void *p, size_t n, size_t *off)
{
	for (struct devmem *m = mems; m; m = m->next)
		if ((const char *)p >= m->shadow && (const char *)p < m->shadow + (m->size ? m->size : 1)) {
			*off = (size_t)((const char *)p - m->shadow);
			return *off + n <= m->size || (n == 0) ? m : NULL;
		}
	return NULL;
}

static int is_pinned(const void *p, size_t n)
{
	for (struct pinned *q = pins; q; q = q->next)
		if ((const char *)p >= q->p && (const char *)p + n <= q->p + q->size)
			return 1;
	return 0;
}

/* Lock held: whether [p, p + n) is pinned and mapped into the device's address space. */
static int is_mapped(const void *p, size_t n)
{
	for (struct pinned *q = pins; q; q = q->next)
		if ((const char *)p >= q->p && (const char *)p + n <= q->p + q->size)
			return q->mapped;
	return 0;
}

static int is_dev_addr(const void *p)
{
	for (struct devmem *m = mems; m; m = m->next)
		if ((const char *)p >= m->shadow && (const char *)p < m->shadow + m->map)
			return 1;
	return 0;
}

/* --- streams ----------------------------------------------------------------------------- */

static void demand(struct dstream *s, uint64_t seq)
{
	if (s->demanded < seq) {
		s->demanded = seq;
		pthread_cond_broadcast(&cv);
	}
}

/* Lock held: demands s up to seq and waits until it has run that far. */
static void run_until(struct dstream *s, uint64_t seq)
{
	demand(s, seq);
	while (s->done < seq)
		pthread_cond_wait(&cv, &mu);
}

static void exec_op(struct op *o)
{
	switch (o->kind) {
	case OP_COPY:
		if (o->fail) { /* the asynchronous error: nothing copied */
			__atomic_store_n(&sticky_err, (int)cudaErrorLaunchFailure, __ATOMIC_SEQ_CST);
			break;
		}
		memcpy(o->dst, o->src, o->n);
		break;
	case OP_SET:
		memset(o->dst, o->val, o->n);
		break;
	case OP_HOSTFN:
		/* CUDA may run the host functions of every stream on one thread: one at a time. */
		pthread_mutex_lock(&hostfn_mu);
		in_hostfn = 1;
		o->fn(o->arg);
		in_hostfn = 0;
		pthread_mutex_unlock(&hostfn_mu);
		break;
	case OP_WAIT:
		pthread_mutex_lock(&mu);
		run_until(o->on, o->seq);
		pthread_mutex_unlock(&mu);
		break;
	case OP_WAITVAL:
		/* The GPU polls host memory over PCIe; so does this thread. */
		while (__atomic_load_n(o->addr, __ATOMIC_ACQUIRE) < (uint32_t)o->val)
			usleep(50);
		break;
	}
}

static void *stream_thread(void *arg)
{
	struct dstream *s = arg;
	pthread_mutex_lock(&mu);
	for (;;) {
		while (!(s->head && s->done < s->demanded) && !(s->destroyed && !s->head))
			pthread_cond_wait(&cv, &mu);
		if (!s->head)
			break;
		struct op *o = s->head;
		s->head = o->next;
		if (!s->head)
			s->tail = NULL;
		s->copies -= o->kind == OP_COPY;
		pthread_mutex_unlock(&mu);
		exec_op(o);
		free(o);
		pthread_mutex_lock(&mu);
		s->done++;
		pthread_cond_broadcast(&cv);
	}
	pthread_mutex_unlock(&mu);
	return NULL;
}

/* Lock held. */
static struct dstream *stream_new(int dev, int blocking, int is_legacy)
{
	struct dstream *s = calloc(1, sizeof *s);
	if (!s)
		return NULL;
	s->dev = dev;
	s->blocking = blocking;
	s->legacy = is_legacy;
	if (pthread_create(&s->thr, NULL, stream_thread, s)) {
		free(s);
		return NULL;
	}
	pthread_detach(s->thr);
	s->next_all = streams;
	streams = s;
	return s;
}

/* cudaStreamPerThread: each thread's own stream per device, blocking (it synchronizes with the
 * legacy stream, as CUDA's per-thread default stream does); kept, as every stream is. */
static __thread struct dstream *per_thread[MAXDEV];

/* Lock held: the stream a cudaStream_t names (0 and cudaStreamLegacy: the legacy stream of the
 * current device; cudaStreamPerThread: the calling thread's own stream of it). */
static struct dstream *stream_of(cudaStream_t st)
{
	if ((uintptr_t)st > 2)
		return (struct dstream *)st;
	int d = ctx_dev();
	if (st == cudaStreamPerThread) {
		if (!per_thread[d])
			per_thread[d] = stream_new(d, 1, 0);
		return per_thread[d];
	}
	if (!legacy[d])
		legacy[d] = stream_new(d, 0, 1);
	return legacy[d];
}

static void push(struct dstream *s, struct op *o)
{
	o->next = NULL;
	if (s->tail)
		s->tail->next = o;
	else
		s->head = o;
	s->tail = o;
	s->queued++;
	if (o->kind == OP_COPY && ++s->copies > max_copies)
		max_copies = s->copies;
	if (eager)
		demand(s, s->queued);
	pthread_cond_broadcast(&cv);
}

static int push_wait(struct dstream *s, struct dstream *on, uint64_t seq)
{
	if (on == s || on->done >= seq)
		return 0;
	struct op *w = calloc(1, sizeof *w);
	if (!w)
		return -1;
	w->kind = OP_WAIT;
	w->on = on;
	w->seq = seq;
	push(s, w);
	return 0;
}

/* Lock held: queues o on s after the implicit legacy-stream ordering. Returns o's seq. */
static uint64_t enqueue(struct dstream *s, struct op *o)
{
	if (s->legacy) {
		for (struct dstream *b = streams; b; b = b->next_all)
			if (b->blocking && b->dev == s->dev && !b->destroyed)
				push_wait(s, b, b->queued);
	} else if (s->blocking && legacy[s->dev]) {
		push_wait(s, legacy[s->dev], legacy[s->dev]->queued);
	}
	push(s, o);
	return s->queued;
}

static void sync_all(int dev)
{
	for (struct dstream *s = streams; s; s = s->next_all)
		if (dev < 0 || s->dev == dev)
			run_until(s, s->queued);
}

/* --- runtime: devices and errors ---------------------------------------------------------- */

API long cudadouble_host_funcs(void)
{
	return __atomic_load_n(&host_funcs, __ATOMIC_RELAXED);
}

API int cudadouble_device_count(void)
{
	pthread_once(&once, init_once);
	return ndev;
}

API void cudadouble_runtime_loaded(int version)
{
	pthread_once(&once, init_once);
	__atomic_add_fetch(&runtimes_loaded, 1, __ATOMIC_SEQ_CST);
	(void)version;
}

API int cudadouble_driver_version(void)
{
	pthread_once(&once, init_once);
	return driver_version;
}

API unsigned cudadouble_ctx_mask(void)
{
	return __atomic_load_n(&ctx_mask, __ATOMIC_SEQ_CST);
}

API int cudadouble_runtimes(void)
{
	return __atomic_load_n(&runtimes_loaded, __ATOMIC_SEQ_CST);
}

API void cudadouble_fail(const char *name, long nth)
{
	pthread_once(&once, init_once);
	snprintf(fail_name, sizeof fail_name, "%s", name ? name : "*");
	__atomic_store_n(&fail_count, 0, __ATOMIC_SEQ_CST);
	fail_at = nth;
}

API long cudadouble_calls(void)
{
	return __atomic_load_n(&fail_count, __ATOMIC_SEQ_CST);
}

API int cudadouble_stream_device(void *st)
{
	pthread_mutex_lock(&mu);
	int d = stream_of((cudaStream_t)st)->dev;
	pthread_mutex_unlock(&mu);
	return d;
}

API cudaError_t cudaDriverGetVersion(int *v)
{
	ENTER();
	*v = driver_version;
	return cudaSuccess;
}

API cudaError_t cudaSetDevice(int dev)
{
	ENTER();
	if (dev < 0 || dev >= ndev)
		return ret(cudaErrorInvalidDevice);
	cur_dev = dev;
	/* CUDA 12 and later: cudaSetDevice initializes the device's primary context. */
	__atomic_or_fetch(&ctx_mask, 1u << dev, __ATOMIC_SEQ_CST);
	return cudaSuccess;
}

API cudaError_t cudaGetDevice(int *dev)
{
	ENTER();
	*dev = cur_dev < 0 ? 0 : cur_dev; /* no context is created */
	return cudaSuccess;
}

API cudaError_t cudaGetLastError(void)
{
	cudaError_t e = last_err;
	last_err = cudaSuccess;
	return e;
}

API cudaError_t cudaPeekAtLastError(void)
{
	return last_err;
}

struct errname {
	int code;
	const char *name, *text;
};
static const struct errname errnames[] = {
	{ cudaSuccess, "cudaSuccess", "no error" },
	{ cudaErrorInvalidValue, "cudaErrorInvalidValue", "invalid argument" },
	{ cudaErrorMemoryAllocation, "cudaErrorMemoryAllocation", "out of memory" },
	{ cudaErrorInsufficientDriver, "cudaErrorInsufficientDriver",
	  "CUDA driver version is insufficient for CUDA runtime version" },
	{ cudaErrorNoDevice, "cudaErrorNoDevice", "no CUDA-capable device is detected" },
	{ cudaErrorInvalidDevice, "cudaErrorInvalidDevice", "invalid device ordinal" },
	{ cudaErrorInvalidResourceHandle, "cudaErrorInvalidResourceHandle", "invalid resource handle" },
	{ cudaErrorNotReady, "cudaErrorNotReady", "device not ready" },
	{ cudaErrorInvalidMemcpyDirection, "cudaErrorInvalidMemcpyDirection",
	  "invalid copy direction for memcpy" },
	{ cudaErrorHostMemoryAlreadyRegistered, "cudaErrorHostMemoryAlreadyRegistered",
	  "part or all of the requested memory range is already mapped" },
	{ cudaErrorHostMemoryNotRegistered, "cudaErrorHostMemoryNotRegistered",
	  "pointer does not correspond to a registered memory region" },
	{ cudaErrorLaunchFailure, "cudaErrorLaunchFailure", "unspecified launch failure" },
	{ cudaErrorNotPermitted, "cudaErrorNotPermitted", "operation not permitted" },
	{ cudaErrorUnknown, "cudaErrorUnknown", "unknown error" },
};

static const struct errname *errname_of(cudaError_t e)
{
	for (size_t i = 0; i < sizeof errnames / sizeof errnames[0]; i++)
		if (errnames[i].code == (int)e)
			return &errnames[i];
	return &errnames[sizeof errnames / sizeof errnames[0] - 1];
}

API const char *cudaGetErrorString(cudaError_t e)
{
	return errname_of(e)->text;
}

API const char *cudaGetErrorName(cudaError_t e)
{
	return errname_of(e)->name;
}

/* --- runtime: memory ---------------------------------------------------------------------- */

API cudaError_t cudaMalloc(void **p, size_t size)
{
	ENTER();
	int d = ctx_dev();
	size_t map = (size ? size : 1) + 4095;
	map &= ~(size_t)4095;
	struct devmem *m = calloc(1, sizeof *m);
	if (!m)
		return ret(cudaErrorMemoryAllocation);
	m->shadow = mmap(NULL, map, PROT_NONE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
	m->backing = mmap(NULL, map, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
	if (m->shadow == MAP_FAILED || m->backing == MAP_FAILED) {
		if (m->shadow != MAP_FAILED)
			munmap(m->shadow, map);
		if (m->backing != MAP_FAILED)
			munmap(m->backing, map);
		free(m);
		return ret(cudaErrorMemoryAllocation);
	}
	/* Fresh device memory is not zero on a GPU. */
	memset(m->backing, 0xCD, map);
	m->size = size;
	m->map = map;
	m->dev = d;
	pthread_mutex_lock(&mu);
	m->next = mems;
	mems = m;
	pthread_mutex_unlock(&mu);
	*p = m->shadow;
	return cudaSuccess;
}

API cudaError_t cudaFree(void *p)
{
	ENTER();
	if (!p)
		return cudaSuccess;
	pthread_mutex_lock(&mu);
	struct devmem **pp = &mems;
	while (*pp && (*pp)->shadow != p)
		pp = &(*pp)->next;
	struct devmem *m = *pp;
	if (!m) {
		pthread_mutex_unlock(&mu);
		return ret(cudaErrorInvalidValue);
	}
	/* cudaFree synchronizes the device: no queued work may still use the memory. */
	sync_all(m->dev);
	*pp = m->next;
	pthread_mutex_unlock(&mu);
	munmap(m->shadow, m->map);
	munmap(m->backing, m->map);
	free(m);
	return cudaSuccess;
}

API cudaError_t cudaHostAlloc(void **p, size_t size, unsigned flags)
{
	ENTER();
	ctx_dev();
	size_t map = ((size ? size : 1) + 4095) & ~(size_t)4095;
	struct pinned *q = calloc(1, sizeof *q);
	/* One PROT_NONE guard page after the memory: an overflow of a page-multiple buffer faults. */
	char *m = mmap(NULL, map + 4096, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
	if (!q || m == MAP_FAILED) {
		free(q);
		if (m != MAP_FAILED)
			munmap(m, map + 4096);
		return ret(cudaErrorMemoryAllocation);
	}
	mprotect(m + map, 4096, PROT_NONE);
	q->p = m;
	q->size = map;
	q->owned = 1;
	q->mapped = !!(flags & cudaHostAllocMapped);
	__atomic_add_fetch(&host_allocs, 1, __ATOMIC_SEQ_CST);
	pthread_mutex_lock(&mu);
	q->next = pins;
	pins = q;
	pthread_mutex_unlock(&mu);
	*p = m;
	return cudaSuccess;
}

API cudaError_t cudaMallocHost(void **p, size_t size)
{
	return cudaHostAlloc(p, size, 0);
}

API cudaError_t cudaFreeHost(void *p)
{
	ENTER();
	if (!p)
		return cudaSuccess;
	__atomic_add_fetch(&host_frees, 1, __ATOMIC_SEQ_CST);
	pthread_mutex_lock(&mu);
	/* cudaFreeHost waits for work that may still use it. First: sync_all waits on cv, which
	 * lets other threads free their own pinned memory and relink the list (a pointer into it
	 * taken before would dangle; two restore threads freeing their staging at once did that). */
	sync_all(-1);
	struct pinned **pp = &pins;
	while (*pp && ((*pp)->p != p || !(*pp)->owned))
		pp = &(*pp)->next;
	struct pinned *q = *pp;
	if (!q) {
		pthread_mutex_unlock(&mu);
		return ret(cudaErrorInvalidValue);
	}
	*pp = q->next;
	pthread_mutex_unlock(&mu);
	munmap(q->p, q->size + 4096);
	free(q);
	return cudaSuccess;
}

API cudaError_t cudaHostRegister(void *p, size_t size, unsigned flags)
{
	ENTER();
	ctx_dev();
	struct pinned *q = calloc(1, sizeof *q);
	if (!q)
		return ret(cudaErrorMemoryAllocation);
	q->p = p;
	q->size = size;
	q->mapped = !!(flags & cudaHostRegisterMapped);
	pthread_mutex_lock(&mu);
	int dup = is_pinned(p, 1);
	if (!dup) {
		q->next = pins;
		pins = q;
	}
	pthread_mutex_unlock(&mu);
	if (dup) {
		free(q);
		return ret(cudaErrorHostMemoryAlreadyRegistered);
	}
	return cudaSuccess;
}

API cudaError_t cudaHostUnregister(void *p)
{
	ENTER();
	pthread_mutex_lock(&mu);
	sync_all(-1); /* before the search: it waits on cv (see cudaFreeHost) */
	struct pinned **pp = &pins;
	while (*pp && ((*pp)->p != p || (*pp)->owned))
		pp = &(*pp)->next;
	struct pinned *q = *pp;
	if (q)
		*pp = q->next;
	pthread_mutex_unlock(&mu);
	if (!q)
		return ret(cudaErrorHostMemoryNotRegistered);
	free(q);
	return cudaSuccess;
}

/* cudaHostAlloc calls so far, and copies that had a pageable side. */
API long cudadouble_max_copies_in_flight(void)
{
	pthread_mutex_lock(&mu);
	long m = max_copies;
	max_copies = 0;
	pthread_mutex_unlock(&mu);
	return m;
}

API long cudadouble_host_frees(void)
{
	return __atomic_load_n(&host_frees, __ATOMIC_SEQ_CST);
}

API long cudadouble_host_allocs(void)
{
	return __atomic_load_n(&host_allocs, __ATOMIC_SEQ_CST);
}

API long cudadouble_stream_syncs(void)
{
	return __atomic_load_n(&stream_syncs, __ATOMIC_SEQ_CST);
}

API long cudadouble_pageable_copies(void)
{
	return __atomic_load_n(&pageable_copies, __ATOMIC_SEQ_CST);
}

API cudaError_t cudaHostGetDevicePointer(void **dptr, void *host, unsigned flags)
{
	ENTER();
	(void)flags;
	pthread_mutex_lock(&mu);
	int ok = is_mapped(host, 1); /* as CUDA: only mapped pinned memory has a device pointer */
	pthread_mutex_unlock(&mu);
	if (!ok)
		return ret(cudaErrorInvalidValue);
	*dptr = host; /* unified addressing */
	return cudaSuccess;
}

API cudaError_t cudaPointerGetAttributes(struct cudaPointerAttributes *a, const void *p)
{
	ENTER();
	ctx_dev(); /* as the runtime: a thread without a context gets device 0's */
	memset(a, 0, sizeof *a);
	size_t off;
	pthread_mutex_lock(&mu);
	struct devmem *m = find_dev(p, 0, &off);
	int pin = !m && is_pinned(p, 1);
	pthread_mutex_unlock(&mu);
	if (m) {
		a->type = cudaMemoryTypeDevice;
		a->device = m->dev;
		a->devicePointer = (void *)p;
	} else if (pin) {
		a->type = cudaMemoryTypeHost;
		a->device = cur_dev < 0 ? 0 : cur_dev;
		a->devicePointer = a->hostPointer = (void *)p;
	} else {
		a->type = cudaMemoryTypeUnregistered;
		a->device = -2;
		a->hostPointer = (void *)p;
	}
	return cudaSuccess;
}

/* Resolves one side of a copy: device memory -> its backing (*dev = 1), host memory as is. */
static cudaError_t resolve(const void *p, size_t n, int want_dev, void **out, int *pageable)
{
	size_t off;
	struct devmem *m = find_dev(p, n, &off);
	if (want_dev) {
		if (!m)
			return is_dev_addr(p) ? cudaErrorInvalidValue : cudaErrorInvalidValue;
		*out = m->backing + off;
		return cudaSuccess;
	}
	if (m || is_dev_addr(p))
		return cudaErrorInvalidValue;
	*out = (void *)p;
	if (!is_pinned(p, n))
		*pageable = 1;
	return cudaSuccess;
}

static cudaError_t copy_async(void *dst, const void *src, size_t n, enum cudaMemcpyKind kind,
			      cudaStream_t st, int sync)
{
	if (n == 0)
		return cudaSuccess;
	int ddev, sdev;
	switch (kind) {
	case cudaMemcpyHostToDevice: ddev = 1, sdev = 0; break;
	case cudaMemcpyDeviceToHost: ddev = 0, sdev = 1; break;
	case cudaMemcpyDeviceToDevice: ddev = 1, sdev = 1; break;
	case cudaMemcpyHostToHost: ddev = 0, sdev = 0; break;
	default: return ret(cudaErrorInvalidMemcpyDirection);
	}
	struct op *o = calloc(1, sizeof *o);
	if (!o)
		return ret(cudaErrorMemoryAllocation);
	o->kind = OP_COPY;
	o->n = n;
	o->fail = !sync && async_fail_at > 0 &&
		  __atomic_add_fetch(&async_count, 1, __ATOMIC_SEQ_CST) == async_fail_at;
	int pageable = 0;
	pthread_mutex_lock(&mu);
	cudaError_t e = resolve(dst, n, ddev, &o->dst, &pageable);
	if (e == cudaSuccess)
		e = resolve(src, n, sdev, (void **)&o->src, &pageable);
	if (e != cudaSuccess) {
		pthread_mutex_unlock(&mu);
		free(o);
		return ret(e);
	}
	struct dstream *s = stream_of(st);
	uint64_t seq = enqueue(s, o);
	/* A copy to or from pageable memory returns once it is done. */
	if (pageable)
		__atomic_add_fetch(&pageable_copies, 1, __ATOMIC_SEQ_CST);
	if (sync || pageable)
		run_until(s, seq);
	pthread_mutex_unlock(&mu);
	return cudaSuccess;
}

API void cudadouble_fail_async(long nth)
{
	pthread_once(&once, init_once);
	__atomic_store_n(&async_count, 0, __ATOMIC_SEQ_CST);
	async_fail_at = nth;
}

API cudaError_t cudaMemcpyAsync(void *dst, const void *src, size_t n, enum cudaMemcpyKind kind,
				cudaStream_t st)
{
	ENTER();
	return copy_async(dst, src, n, kind, st, 0);
}

API cudaError_t cudaMemcpy(void *dst, const void *src, size_t n, enum cudaMemcpyKind kind)
{
	ENTER();
	return copy_async(dst, src, n, kind, 0, 1);
}

static cudaError_t set_async(void *p, int v, size_t n, cudaStream_t st, int sync)
{
	if (n == 0)
		return cudaSuccess;
	struct op *o = calloc(1, sizeof *o);
	if (!o)
		return ret(cudaErrorMemoryAllocation);
	pthread_mutex_lock(&mu);
	size_t off;
	struct devmem *m = find_dev(p, n, &off);
	if (!m) {
		pthread_mutex_unlock(&mu);
		free(o);
		return ret(cudaErrorInvalidValue);
	}
	o->kind = OP_SET;
	o->dst = m->backing + off;
	o->n = n;
	o->val = v;
	struct dstream *s = stream_of(st);
	uint64_t seq = enqueue(s, o);
	if (sync)
		run_until(s, seq);
	pthread_mutex_unlock(&mu);
	return cudaSuccess;
}

API cudaError_t cudaMemsetAsync(void *p, int v, size_t n, cudaStream_t st)
{
	ENTER();
	return set_async(p, v, n, st, 0);
}

API cudaError_t cudaMemset(void *p, int v, size_t n)
{
	ENTER();
	/* Asynchronous with respect to the host, on the legacy stream. */
	return set_async(p, v, n, 0, 0);
}

/* --- runtime: streams, events, host functions --------------------------------------------- */

API cudaError_t cudaStreamCreateWithFlags(cudaStream_t *st, unsigned flags)
{
	ENTER();
	int d = ctx_dev();
	pthread_mutex_lock(&mu);
	struct dstream *s = stream_new(d, !(flags & cudaStreamNonBlocking), 0);
	pthread_mutex_unlock(&mu);
	if (!s)
		return ret(cudaErrorMemoryAllocation);
	*st = (cudaStream_t)s;
	return cudaSuccess;
}

API cudaError_t cudaStreamCreate(cudaStream_t *st)
{
	return cudaStreamCreateWithFlags(st, cudaStreamDefault);
}

API cudaError_t cudaStreamDestroy(cudaStream_t st)
{
	ENTER();
	if ((uintptr_t)st <= 2)
		return ret(cudaErrorInvalidResourceHandle);
	pthread_mutex_lock(&mu);
	struct dstream *s = (struct dstream *)st;
	/* Work already queued still completes; the thread ends when it has. */
	demand(s, s->queued);
	s->destroyed = 1;
	pthread_cond_broadcast(&cv);
	pthread_mutex_unlock(&mu);
	return cudaSuccess;
}

API cudaError_t cudaStreamSynchronize(cudaStream_t st)
{
	ENTER();
	__atomic_add_fetch(&stream_syncs, 1, __ATOMIC_SEQ_CST);
	pthread_mutex_lock(&mu);
	struct dstream *s = stream_of(st);
	run_until(s, s->queued);
	pthread_mutex_unlock(&mu);
	return after_wait();
}

API cudaError_t cudaStreamQuery(cudaStream_t st)
{
	ENTER();
	pthread_mutex_lock(&mu);
	struct dstream *s = stream_of(st);
	demand(s, s->queued);
	int ready = s->done >= s->queued;
	pthread_mutex_unlock(&mu);
	return after_wait() ? (cudaError_t)sticky_err : ready ? cudaSuccess : cudaErrorNotReady;
}

API cudaError_t cudaDeviceSynchronize(void)
{
	ENTER();
	int d = ctx_dev();
	pthread_mutex_lock(&mu);
	sync_all(d);
	pthread_mutex_unlock(&mu);
	return after_wait();
}

API cudaError_t cudaEventCreateWithFlags(cudaEvent_t *ev, unsigned flags)
{
	ENTER();
	(void)flags;
	int d = ctx_dev();
	struct devent *e = calloc(1, sizeof *e);
	if (!e)
		return ret(cudaErrorMemoryAllocation);
	e->dev = d;
	*ev = (cudaEvent_t)e;
	return cudaSuccess;
}

API cudaError_t cudaEventCreate(cudaEvent_t *ev)
{
	return cudaEventCreateWithFlags(ev, 0);
}

API cudaError_t cudaEventDestroy(cudaEvent_t ev)
{
	ENTER();
	free(ev);
	return cudaSuccess;
}

API cudaError_t cudaEventRecord(cudaEvent_t ev, cudaStream_t st)
{
	ENTER();
	if (!ev)
		return ret(cudaErrorInvalidResourceHandle);
	struct devent *e = (struct devent *)ev;
	pthread_mutex_lock(&mu);
	struct dstream *s = stream_of(st);
	if (s->dev != e->dev) { /* as CUDA: an event belongs to its device's streams */
		pthread_mutex_unlock(&mu);
		return ret(cudaErrorInvalidResourceHandle);
	}
	e->s = s;
	e->seq = s->queued; /* complete once everything queued so far has run */
	pthread_mutex_unlock(&mu);
	return cudaSuccess;
}

API cudaError_t cudaEventQuery(cudaEvent_t ev)
{
	ENTER();
	struct devent *e = (struct devent *)ev;
	pthread_mutex_lock(&mu);
	int ready = 1;
	if (e->s) {
		demand(e->s, e->seq);
		ready = e->s->done >= e->seq;
	}
	pthread_mutex_unlock(&mu);
	return after_wait() ? (cudaError_t)sticky_err : ready ? cudaSuccess : cudaErrorNotReady;
}

API cudaError_t cudaEventSynchronize(cudaEvent_t ev)
{
	ENTER();
	struct devent *e = (struct devent *)ev;
	pthread_mutex_lock(&mu);
	if (e->s)
		run_until(e->s, e->seq);
	pthread_mutex_unlock(&mu);
	return after_wait();
}

API cudaError_t cudaStreamWaitEvent(cudaStream_t st, cudaEvent_t ev, unsigned flags)
{
	ENTER();
	(void)flags;
	struct devent *e = (struct devent *)ev;
	if (!e)
		return ret(cudaErrorInvalidResourceHandle);
	pthread_mutex_lock(&mu);
	struct dstream *s = stream_of(st);
	/* The wait captures the event's state now: a later record does not change it. */
	int bad = e->s && push_wait(s, e->s, e->seq);
	pthread_mutex_unlock(&mu);
	return bad ? ret(cudaErrorMemoryAllocation) : cudaSuccess;
}

API cudaError_t cudaLaunchHostFunc(cudaStream_t st, cudaHostFn_t fn, void *arg)
{
	ENTER();
	struct op *o = calloc(1, sizeof *o);
	if (!o)
		return ret(cudaErrorMemoryAllocation);
	o->kind = OP_HOSTFN;
	o->fn = fn;
	o->arg = arg;
	__atomic_add_fetch(&host_funcs, 1, __ATOMIC_RELAXED);
	pthread_mutex_lock(&mu);
	struct dstream *s = stream_of(st);
	/* The GPU calls it once the work before it is done: that work is needed. */
	demand(s, enqueue(s, o));
	pthread_mutex_unlock(&mu);
	return cudaSuccess;
}

/* --- driver API --------------------------------------------------------------------------- */

typedef int CUresult_t;

API CUresult_t cuInit(unsigned flags)
{
	(void)flags;
	if (injected("cuInit"))
		return 2;
	return 0;
}

API CUresult_t cuDriverGetVersion(int *v)
{
	pthread_once(&once, init_once);
	*v = driver_version;
	return 0;
}

API CUresult_t cuDeviceGetCount(int *n)
{
	pthread_once(&once, init_once);
	*n = ndev;
	return 0;
}

API CUresult_t cuCtxGetCurrent(void **ctx)
{
	pthread_once(&once, init_once);
	*ctx = cur_dev < 0 ? NULL : &ctx_objs[cur_dev];
	return 0;
}

API CUresult_t cuCtxSetCurrent(void *ctx)
{
	pthread_once(&once, init_once);
	if (!ctx) {
		cur_dev = -1;
		return 0;
	}
	ptrdiff_t d = (char *)ctx - ctx_objs;
	if (d < 0 || d >= ndev)
		return 201; /* CUDA_ERROR_INVALID_CONTEXT */
	cur_dev = (int)d;
	return 0;
}

API CUresult_t cuCtxGetDevice(int *dev)
{
	pthread_once(&once, init_once);
	if (cur_dev < 0)
		return 201; /* CUDA_ERROR_INVALID_CONTEXT */
	*dev = cur_dev;
	return 0;
}

/* The context of a stream: its device's (the legacy stream: the current device's). */
API CUresult_t cuStreamGetCtx(void *stream, void **ctx)
{
	pthread_once(&once, init_once);
	pthread_mutex_lock(&mu);
	int d = stream_of((cudaStream_t)stream)->dev;
	pthread_mutex_unlock(&mu);
	*ctx = &ctx_objs[d];
	return 0;
}

API CUresult_t cuDevicePrimaryCtxGetState(int dev, unsigned *flags, int *active)
{
	pthread_once(&once, init_once);
	if (dev < 0 || dev >= ndev)
		return 101; /* CUDA_ERROR_INVALID_DEVICE */
	*flags = 0;
	*active = !!(cudadouble_ctx_mask() & (1u << dev));
	return 0;
}

/* CU_STREAM_WAIT_VALUE_GEQ (0) only: the stream waits until *addr >= value. */
API CUresult_t cuStreamWaitValue32_v2(void *stream, uintptr_t addr, uint32_t value, unsigned flags)
{
	if (injected("cuStreamWaitValue32"))
		return 2;
	pthread_once(&once, init_once);
	if (no_memops)
		return 801; /* CUDA_ERROR_NOT_SUPPORTED: stream memory operations disabled */
	if (flags != 0)
		return 1; /* CUDA_ERROR_INVALID_VALUE */
	struct op *o = calloc(1, sizeof *o);
	if (!o)
		return 2;
	o->kind = OP_WAITVAL;
	o->addr = (volatile uint32_t *)addr;
	o->val = (int)value;
	pthread_mutex_lock(&mu);
	if (!is_mapped((void *)addr, 4)) { /* the device reads the word: mapped memory only */
		pthread_mutex_unlock(&mu);
		free(o);
		return 1;
	}
	enqueue(stream_of((cudaStream_t)stream), o);
	pthread_mutex_unlock(&mu);
	return 0;
}

API CUresult_t cuStreamWaitValue32(void *stream, uintptr_t addr, uint32_t value, unsigned flags)
{
	return cuStreamWaitValue32_v2(stream, addr, value, flags);
}
