/* The save pipeline's snapshot strategy: what it learned of each tensor it saved (by name hash),
 * kept in p->hints across saves (and across pipe_replace), to choose per tensor whether the
 * snapshot hashes first or only copies. Calls no other file of the pipeline.
 *
 * Hashing during the snapshot lets a chunk the store already holds skip the copy (an incremental
 * snapshot costs a hash instead of a copy), but costs a hash on top of the copy for a chunk that
 * changed. So: copy only, the first time the handle saves a tensor (nothing to dedup against) and
 * when most of its chunks changed last time (dense updates); hash first otherwise. */
#include "save/pipe_int.h"

#include <stdlib.h>

/* Open addressing on the name hash (0 marks a free slot). */
static struct tensor_hint *hint_find(struct pipe *p, uint64_t key)
{
	if (!p->caphints)
		return NULL;
	for (size_t i = key & (p->caphints - 1);; i = (i + 1) & (p->caphints - 1)) {
		if (p->hints[i].key == key)
			return &p->hints[i];
		if (!p->hints[i].key)
			return NULL;
	}
}

static struct tensor_hint *hint_add(struct pipe *p, uint64_t key)
{
	if ((p->nhints + 1) * 2 > p->caphints) {
		size_t n = p->caphints ? p->caphints * 2 : 256;
		struct tensor_hint *nh = calloc(n, sizeof *nh), *old = p->hints;
		if (!nh)
			return NULL; /* only a hint */
		size_t ocap = p->caphints;
		p->hints = nh;
		p->caphints = n;
		for (size_t i = 0; i < ocap; i++)
			if (old[i].key)
				*hint_add(p, old[i].key) = old[i];
		free(old);
	}
	size_t i = key & (p->caphints - 1);
	while (p->hints[i].key)
		i = (i + 1) & (p->caphints - 1);
	p->hints[i].key = key;
	p->nhints++;
	return &p->hints[i];
}

static uint64_t hint_key(const struct pipe_tensor *t)
{
	uint64_t k = ckpt_checksum64(t->name, t->name_len);
	return k ? k : 1;
}

void pipe_choose_snapshot(struct pipe *p, struct pipe_save *ps)
{
	pthread_mutex_lock(&p->hint_mu);
	for (size_t i = 0; i < ps->nt; i++) {
		struct pipe_tensor *t = &ps->t[i];
		struct tensor_hint *h = hint_find(p, hint_key(t));
		t->hash_first = h && h->state == 1;
		t->hf_hit = t->hf_miss = 0;
	}
	ps->hf_hit = ps->hf_miss = 0;
	pthread_mutex_unlock(&p->hint_mu);
}

void pipe_learn_snapshot(struct pipe *p, struct pipe_save *ps)
{
	pthread_mutex_lock(&p->hint_mu);
	for (size_t i = 0; i < ps->nt; i++) {
		struct pipe_tensor *t = &ps->t[i];
		uint64_t key = hint_key(t), nrefs = 0, nnew = 0;
		for (uint64_t g = t->first_chunk; g < ps->nchunks_total && (i + 1 == ps->nt ||
		     g < ps->t[i + 1].first_chunk); g++, nrefs++)
			nnew += (ps->chunks[ps->refs[g]].flags & MF_CHUNK_NEW) != 0;
		struct tensor_hint *h = hint_find(p, key);
		if (!h) {
			if ((h = hint_add(p, key)))
				h->state = 1;
			continue;
		}
		h->state = 2 * nnew > nrefs ? 2 : 1;
	}
	pthread_mutex_unlock(&p->hint_mu);
}
