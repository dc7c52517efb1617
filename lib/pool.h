/* The staging pool: a bounded set of pinned, 4 KiB-aligned slabs of one size (the I/O size),
 * allocated exactly as asked through the GPU provider (page-locked host memory). Slabs are granted
 * strictly in ticket order, so that a later save can never take the slabs an earlier one needs to
 * finish (no deadlock, FIFO backpressure). A slab returns only when its write completed. */
#ifndef CKPT_POOL_H
#define CKPT_POOL_H

#include <pthread.h>
#include <stddef.h>
#include <stdint.h>

#include "gpu.h"

struct ckpt_pool {
	const struct ckpt_gpu_ops *gpu;
	size_t slab_size;
	unsigned nslabs;
	void *base;                   /* one allocation holding every slab, back to back */
	void **slabs;
	unsigned *free_stack;
	unsigned nfree;
	uint64_t next_ticket, serving;
	uint64_t in_use, peak;        /* bytes */
	pthread_mutex_t mu;
	pthread_cond_t cv;
};

/* Allocates nslabs slabs of slab_size bytes, in one allocation (one page-locking call, and a
 * CUDA process can register it with one cudaHostRegister). Returns 0 or -CKPT_E_NOMEM (nothing
 * allocated). */
int pool_init(struct ckpt_pool *p, const struct ckpt_gpu_ops *gpu, size_t slab_size, unsigned nslabs);
void pool_fini(struct ckpt_pool *p);
/* Takes the next ticket: the order in which slabs will be granted. */
uint64_t pool_ticket(struct ckpt_pool *p);
/* Waits for ticket's turn and a free slab; returns its index. *waited gets the seconds blocked. */
unsigned pool_acquire(struct ckpt_pool *p, uint64_t ticket, double *waited);
void pool_release(struct ckpt_pool *p, unsigned slab);
/* Resets the peak counter (per save) and returns the previous peak. */
uint64_t pool_take_peak(struct ckpt_pool *p);

#endif
