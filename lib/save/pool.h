/* The staging pool: a bounded set of pinned, 4 KiB-aligned slabs of one size (the I/O size),
 * allocated exactly as asked through the GPU provider (page-locked host memory). Nobody waits in
 * the pool: its user (the pipeline) keeps the jobs waiting for a slab in a queue and grants them
 * strictly in order, under its own lock, when a slab returns, so that a later save can never take
 * the slabs an earlier one needs to finish (no deadlock, FIFO backpressure). A slab returns only
 * when its write completed. */
#ifndef CKPT_POOL_H
#define CKPT_POOL_H

#include <pthread.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "gpu/gpu.h"

struct ckpt_pool {
	const struct ckpt_gpu_ops *gpu;
	size_t slab_size;
	unsigned nslabs;
	void *base;                   /* one allocation holding every slab, back to back */
	void **slabs;
	unsigned *free_stack;
	unsigned nfree;
	uint64_t in_use, peak;        /* bytes */
	pthread_mutex_t mu;
};

/* Allocates nslabs slabs of slab_size bytes, in one allocation (one page-locking call, and a
 * CUDA process can register it with one cudaHostRegister). Returns 0 or -CKPT_E_NOMEM (nothing
 * allocated). */
int pool_init(struct ckpt_pool *p, const struct ckpt_gpu_ops *gpu, size_t slab_size, unsigned nslabs);
void pool_fini(struct ckpt_pool *p);
/* Takes a free slab (the one released last: still warm in the caches) into *slab, or returns
 * false when none is free. Never blocks. */
bool pool_try_acquire(struct ckpt_pool *p, unsigned *slab);
void pool_release(struct ckpt_pool *p, unsigned slab);
/* Resets the peak counter (per save) and returns the previous peak. */
uint64_t pool_take_peak(struct ckpt_pool *p);

#endif
