/* The verify cache (see vcache.h): an open-addressing hash table keyed by record location and
 * digest. The digest is part of the key because a pack id can be reused after gc removed the pack:
 * the same location with another digest is another record. */
#include <stdlib.h>
#include <string.h>

#include "common/common.h"
#include "read/vcache.h"

struct vent {
	uint32_t pack;
	uint64_t offset;
	ckpt_digest digest;
	int state; /* 0: empty slot */
	char *msg;
};

struct ckpt_verify_cache {
	struct vent *v;
	size_t cap, n;
	uint64_t bytes_read, records;
};

static size_t slot_of(const struct ckpt_verify_cache *c, uint32_t pack, uint64_t offset,
		      const ckpt_digest *d)
{
	uint64_t h;
	memcpy(&h, d->b, sizeof h);
	h ^= ((uint64_t)pack << 40) ^ offset;
	h *= 0x9e3779b97f4a7c15ull;
	size_t i = (size_t)(h >> 17) & (c->cap - 1);
	while (c->v[i].state && (c->v[i].pack != pack || c->v[i].offset != offset ||
				 !ckpt_digest_eq(&c->v[i].digest, d)))
		i = (i + 1) & (c->cap - 1);
	return i;
}

CKPT_API ckpt_verify_cache *ckpt_verify_cache_create(void)
{
	struct ckpt_verify_cache *c = calloc(1, sizeof *c);
	if (c && !(c->v = calloc(c->cap = 1024, sizeof *c->v))) {
		free(c);
		c = NULL;
	}
	if (!c)
		ckpt_fail(CKPT_E_NOMEM, "out of memory");
	return c;
}

CKPT_API void ckpt_verify_cache_free(ckpt_verify_cache *c)
{
	if (!c)
		return;
	for (size_t i = 0; i < c->cap; i++)
		free(c->v[i].msg);
	free(c->v);
	free(c);
}

CKPT_API void ckpt_verify_cache_stats(const ckpt_verify_cache *c, uint64_t *bytes_read,
				      uint64_t *records)
{
	if (bytes_read)
		*bytes_read = c ? c->bytes_read : 0;
	if (records)
		*records = c ? c->records : 0;
}

int vcache_get(const struct ckpt_verify_cache *c, uint32_t pack, uint64_t offset,
	       const ckpt_digest *d, const char **msg)
{
	const struct vent *e = &c->v[slot_of(c, pack, offset, d)];
	*msg = e->msg;
	return e->state;
}

static int grow(struct ckpt_verify_cache *c)
{
	struct ckpt_verify_cache n = {.v = calloc(c->cap * 2, sizeof *c->v), .cap = c->cap * 2,
				      .n = c->n};
	if (!n.v)
		return ckpt_fail(CKPT_E_NOMEM, "out of memory");
	for (size_t i = 0; i < c->cap; i++)
		if (c->v[i].state)
			n.v[slot_of(&n, c->v[i].pack, c->v[i].offset, &c->v[i].digest)] = c->v[i];
	free(c->v);
	c->v = n.v;
	c->cap = n.cap;
	return 0;
}

int vcache_put(struct ckpt_verify_cache *c, uint32_t pack, uint64_t offset, const ckpt_digest *d,
	       int state, const char *msg, uint64_t bytes_read)
{
	if ((c->n + 1) * 2 > c->cap && grow(c))
		return -CKPT_E_NOMEM;
	struct vent *e = &c->v[slot_of(c, pack, offset, d)];
	char *m = msg ? strdup(msg) : NULL;
	if (msg && !m)
		return ckpt_fail(CKPT_E_NOMEM, "out of memory");
	if (!e->state)
		c->n++;
	free(e->msg);
	*e = (struct vent){pack, offset, *d, state, m};
	c->bytes_read += bytes_read;
	c->records++;
	return 0;
}
