#include "save/pool.h"

#include <stdlib.h>

#include "common/common.h"

int pool_init(struct ckpt_pool *p, const struct ckpt_gpu_ops *gpu, size_t slab_size, unsigned nslabs)
{
	memset(p, 0, sizeof *p);
	p->gpu = gpu;
	p->slab_size = slab_size;
	p->slabs = calloc(nslabs, sizeof *p->slabs);
	p->free_stack = calloc(nslabs, sizeof *p->free_stack);
	if (!p->slabs || !p->free_stack) {
		pool_fini(p);
		return ckpt_fail(CKPT_E_NOMEM, "out of memory");
	}
	int rc = gpu->alloc_pinned(slab_size * nslabs, &p->base);
	if (rc) {
		pool_fini(p);
		ckpt_fail_prefix("staging pool of %u x %zu bytes", nslabs, slab_size);
		return rc;
	}
	for (unsigned i = 0; i < nslabs; i++)
		p->slabs[i] = (char *)p->base + (size_t)i * slab_size;
	p->nslabs = nslabs;
	/* Hand out low indices first: the same slabs stay warm across saves. */
	for (unsigned i = 0; i < nslabs; i++)
		p->free_stack[i] = nslabs - 1 - i;
	p->nfree = nslabs;
	pthread_mutex_init(&p->mu, NULL);
	return 0;
}

void pool_fini(struct ckpt_pool *p)
{
	if (p->base)
		p->gpu->free_pinned(p->base, p->slab_size * p->nslabs);
	if (p->slabs && p->nslabs)
		pthread_mutex_destroy(&p->mu);
	free(p->slabs);
	free(p->free_stack);
	memset(p, 0, sizeof *p);
}

bool pool_try_acquire(struct ckpt_pool *p, unsigned *slab)
{
	pthread_mutex_lock(&p->mu);
	bool ok = p->nfree > 0;
	if (ok) {
		*slab = p->free_stack[--p->nfree];
		p->in_use += p->slab_size;
		if (p->in_use > p->peak)
			p->peak = p->in_use;
	}
	pthread_mutex_unlock(&p->mu);
	return ok;
}

void pool_release(struct ckpt_pool *p, unsigned slab)
{
	pthread_mutex_lock(&p->mu);
	p->free_stack[p->nfree++] = slab;
	p->in_use -= p->slab_size;
	pthread_mutex_unlock(&p->mu);
}

uint64_t pool_take_peak(struct ckpt_pool *p)
{
	pthread_mutex_lock(&p->mu);
	uint64_t v = p->peak;
	p->peak = p->in_use;
	pthread_mutex_unlock(&p->mu);
	return v;
}
