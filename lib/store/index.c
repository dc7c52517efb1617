/* Open-addressing hash table of chunk locations; digests are uniformly distributed already. */
#include "store/index.h"

#include <stdlib.h>

#include "common/common.h"
#include "store/store.h"

void index_init(struct ckpt_index *ix)
{
	memset(ix, 0, sizeof *ix);
}

void index_free(struct ckpt_index *ix)
{
	free(ix->tab);
	memset(ix, 0, sizeof *ix);
}

static size_t slot_of(const ckpt_digest *d, size_t cap)
{
	return (size_t)get_le64(d->b) & (cap - 1);
}

struct idx_entry *index_find(struct ckpt_index *ix, const ckpt_digest *d)
{
	if (!ix->cap)
		return NULL;
	for (size_t i = slot_of(d, ix->cap);; i = (i + 1) & (ix->cap - 1)) {
		struct idx_entry *e = &ix->tab[i];
		if (!e->used)
			return NULL;
		if (ckpt_digest_eq(&e->c.digest, d))
			return e;
	}
}

static int grow(struct ckpt_index *ix)
{
	size_t ncap = ix->cap ? ix->cap * 2 : 1024;
	struct idx_entry *nt = calloc(ncap, sizeof *nt);
	if (!nt)
		return -1;
	for (size_t i = 0; i < ix->cap; i++) {
		if (!ix->tab[i].used)
			continue;
		size_t j = slot_of(&ix->tab[i].c.digest, ncap);
		while (nt[j].used)
			j = (j + 1) & (ncap - 1);
		nt[j] = ix->tab[i];
	}
	free(ix->tab);
	ix->tab = nt;
	ix->cap = ncap;
	return 0;
}

struct idx_entry *index_put(struct ckpt_index *ix, const struct mf_chunk *c)
{
	struct idx_entry *e = index_find(ix, &c->digest);
	if (e)
		return e;
	if ((ix->count + 1) * 10 > ix->cap * 7 && grow(ix))
		return NULL;
	size_t i = slot_of(&c->digest, ix->cap);
	while (ix->tab[i].used)
		i = (i + 1) & (ix->cap - 1);
	e = &ix->tab[i];
	memset(e, 0, sizeof *e);
	e->c = *c;
	e->c.flags = 0;
	e->used = 1;
	ix->count++;
	return e;
}

/* Deletion under linear probing: rebuild the table without the pending entries. */
void index_drop_pending(struct ckpt_index *ix)
{
	struct ckpt_index n;
	index_init(&n);
	for (size_t i = 0; i < ix->cap; i++)
		if (ix->tab[i].used && !ix->tab[i].pending && !index_put(&n, &ix->tab[i].c)) {
			/* Out of memory: an empty index is still correct, only less useful. */
			index_free(&n);
			break;
		}
	index_free(ix);
	*ix = n;
}

void index_commit_pending(struct ckpt_index *ix)
{
	for (size_t i = 0; i < ix->cap; i++)
		ix->tab[i].pending = 0;
}

void store_index_init(struct store_index *x)
{
	pthread_mutex_init(&x->mu, NULL);
	index_init(&x->idx);
}

void store_index_fini(struct store_index *x)
{
	pthread_mutex_destroy(&x->mu);
	index_free(&x->idx);
	free(x->seen);
}

struct ckpt_index *store_index_lock(struct ckpt_store *s)
{
	pthread_mutex_lock(&s->index.mu);
	return &s->index.idx;
}

void store_index_unlock(struct ckpt_store *s)
{
	pthread_mutex_unlock(&s->index.mu);
}

