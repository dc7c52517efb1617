/* The remote layout (docs/format.md, "Remote layout"): keys, listings, whole-object reads and the
 * remote manifests. */
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/common.h"
#include "dist/dist.h"
#include "format/format.h"
#include "tier/tier.h"

void tier_id_of(const uint8_t uuid[16], char out[TIER_ID_LEN + 1])
{
	for (int i = 0; i < 16; i++)
		snprintf(out + 2 * i, 3, "%02x", uuid[i]);
}

int tier_parse_id(const char *id, uint8_t uuid[16])
{
	if (!id || strlen(id) != TIER_ID_LEN || strspn(id, "0123456789abcdef") != TIER_ID_LEN)
		return ckpt_fail(CKPT_E_INVAL, "store id \"%s\": not 32 lowercase hex digits",
				 id ? id : "");
	for (int i = 0; i < 16; i++) {
		unsigned v;
		sscanf(id + 2 * i, "%2x", &v);
		uuid[i] = (uint8_t)v;
	}
	return 0;
}

void tier_key_hdr(const struct tier_ref *t, char *buf, size_t len)
{
	snprintf(buf, len, TIER_ROOT "/%s/store", t->id);
}

void tier_key_pack(const struct tier_ref *t, uint32_t id, char *buf, size_t len)
{
	snprintf(buf, len, TIER_ROOT "/%s/packs/%08u.pack", t->id, id);
}

void tier_key_mf(const struct tier_ref *t, uint64_t step, char *buf, size_t len)
{
	snprintf(buf, len, TIER_ROOT "/%s/manifests/%020" PRIu64 ".ckpt", t->id, step);
}

void tier_key_part(const struct tier_ref *t, uint64_t step, unsigned rank, char *buf, size_t len)
{
	snprintf(buf, len, TIER_ROOT "/%s/parts/%020" PRIu64 "/%u.part", t->id, step, rank);
}

/* A listing of numbered keys: prefix, exactly digits decimal digits, then ext. */
struct numbered {
	uint64_t *v;
	size_t n, cap;
	size_t plen, digits; /* of the listing's prefix; of the number */
	const char *ext;
};

/* Anything else under the prefix is not ours. */
static int on_numbered(void *arg, const struct rmt_obj *o)
{
	struct numbered *s = arg;
	const char *name = o->key + s->plen;
	if (strlen(name) != s->digits + strlen(s->ext) || strspn(name, "0123456789") != s->digits ||
	    strcmp(name + s->digits, s->ext))
		return 0;
	if (ckpt_grow((void **)&s->v, &s->cap, s->n + 1, sizeof *s->v))
		return -CKPT_E_NOMEM;
	s->v[s->n++] = strtoull(name, NULL, 10);
	return 0;
}

/* The numbers of the keys TIER_ROOT/ID/dir/<digits>ext, in listing order, into *out. */
static long list_numbered(const struct tier_ref *t, const char *dir, size_t digits,
			  const char *ext, uint64_t **out)
{
	char prefix[128];
	snprintf(prefix, sizeof prefix, TIER_ROOT "/%s/%s/", t->id, dir);
	struct numbered s = {.plen = strlen(prefix), .digits = digits, .ext = ext};
	int rc = t->r->ops->list(t->r, prefix, on_numbered, &s);
	if (rc) {
		free(s.v);
		*out = NULL;
		return rc == -CKPT_E_NOMEM ? ckpt_fail(CKPT_E_NOMEM, "out of memory") : rc;
	}
	*out = s.v;
	return (long)s.n;
}

static int cmp_u64(const void *a, const void *b)
{
	uint64_t x = *(const uint64_t *)a, y = *(const uint64_t *)b;
	return x < y ? -1 : x > y;
}

long tier_remote_steps(const struct tier_ref *t, uint64_t **steps)
{
	long n = list_numbered(t, "manifests", 20, ".ckpt", steps);
	if (n > 0)
		qsort(*steps, (size_t)n, sizeof **steps, cmp_u64);
	return n;
}

long tier_remote_packs(const struct tier_ref *t, uint32_t **ids)
{
	uint64_t *v;
	long n = list_numbered(t, "packs", 8, ".pack", &v);
	*ids = n < 0 ? NULL : malloc((size_t)n * sizeof **ids + 1);
	if (n >= 0 && !*ids)
		n = ckpt_fail(CKPT_E_NOMEM, "out of memory");
	for (long i = 0; i < n; i++)
		(*ids)[i] = (uint32_t)v[i]; /* 8 digits fit */
	free(v);
	return n;
}

struct stores {
	char (*ids)[TIER_ID_LEN + 1];
	size_t n, max;
};

static int on_store(void *arg, const struct rmt_obj *o)
{
	struct stores *s = arg;
	const char *id = o->key + strlen(TIER_ROOT "/");
	uint8_t u[16];
	if (strlen(id) != TIER_ID_LEN + 6 || strcmp(id + TIER_ID_LEN, "/store"))
		return 0;
	char buf[TIER_ID_LEN + 1];
	snprintf(buf, sizeof buf, "%.*s", TIER_ID_LEN, id);
	if (tier_parse_id(buf, u))
		return 0;
	if (s->n < s->max)
		memcpy(s->ids[s->n], buf, sizeof buf);
	s->n++;
	return 0;
}

long tier_remote_stores(struct rmt *r, char (*ids)[TIER_ID_LEN + 1], size_t max)
{
	struct stores s = {.ids = ids, .max = max};
	int rc = r->ops->list(r, TIER_ROOT "/", on_store, &s);
	return rc ? rc : (long)s.n;
}

int tier_get_all(const struct tier_ref *t, const char *key, uint64_t max, uint8_t **out,
		 uint64_t *len)
{
	*out = NULL;
	uint64_t size;
	int rc = t->r->ops->stat(t->r, key, &size, NULL);
	if (rc)
		return rc;
	if (size > max)
		return ckpt_fail(CKPT_E_CORRUPT, "remote object %s: %" PRIu64 " bytes, more than %"
				 PRIu64, key, size, max);
	uint8_t *buf = malloc(size ? size : 1);
	if (!buf)
		return ckpt_fail(CKPT_E_NOMEM, "out of memory (%s)", key);
	if ((rc = t->r->ops->get(t->r, key, 0, size, buf))) {
		free(buf);
		return rc;
	}
	*out = buf;
	*len = size;
	return 0;
}

/* Fetches and decodes the manifest of step (which the remote lists). */
static int fetch_one(const struct tier_ref *t, const uint8_t uuid[16], uint64_t step,
		     struct manifest *m, uint8_t **raw, uint64_t *rawlen)
{
	char key[256];
	tier_key_mf(t, step, key, sizeof key);
	uint8_t *buf;
	uint64_t len;
	int rc = tier_get_all(t, key, MF_MAX_LEN, &buf, &len);
	if (rc)
		return rc;
	uint8_t *copy = malloc(len ? len : 1);
	if (!copy) {
		free(buf);
		return ckpt_fail(CKPT_E_NOMEM, "out of memory (%s)", key);
	}
	memcpy(copy, buf, len);
	char what[512];
	snprintf(what, sizeof what, "remote manifest %s", key);
	rc = manifest_decode(buf, len, m, what); /* takes buf */
	if (!rc && (m->step != step || memcmp(m->uuid, uuid, 16))) {
		bool other_step = m->step != step;
		manifest_free(m);
		rc = ckpt_fail(CKPT_E_CORRUPT, "%s: %s", what, other_step ? "another step's manifest"
			       : "another store's manifest (uuid differs)");
	}
	if (rc) {
		free(copy);
		return rc;
	}
	*raw = copy;
	*rawlen = len;
	return 0;
}

int tier_fetch_manifest(const struct tier_ref *t, const uint8_t uuid[16], uint64_t step,
			struct manifest *m, uint8_t **raw, uint64_t *rawlen)
{
	if (step != CKPT_STEP_LATEST)
		return fetch_one(t, uuid, step, m, raw, rawlen);
	uint64_t *steps;
	long n = tier_remote_steps(t, &steps);
	if (n < 0)
		return (int)n;
	int rc = ckpt_fail(CKPT_E_NOTFOUND, "remote %s: no checkpoint of store %s", t->r->url, t->id);
	for (long i = n - 1; i >= 0 && rc && rc != -CKPT_E_NOMEM && rc != -CKPT_E_IO; i--)
		rc = fetch_one(t, uuid, steps[i], m, raw, rawlen); /* a damaged newest: the one before */
	free(steps);
	return rc;
}

unsigned tier_world(const struct manifest *m)
{
	for (uint32_t i = 0; i < m->n_meta; i++)
		if (!strcmp(m->meta[i].key, DIST_WORLD)) {
			const char *p = m->meta[i].value;
			uint64_t w;
			return dist_parse_u64(&p, DIST_MAX_RANKS, &w) ? 0 : (unsigned)w;
		}
	return 0;
}

static int cmp_u32(const void *a, const void *b)
{
	uint32_t x = *(const uint32_t *)a, y = *(const uint32_t *)b;
	return x < y ? -1 : x > y;
}

long tier_packs_of(const struct manifest *m, uint32_t **ids)
{
	uint32_t *v = malloc((m->n_chunks ? m->n_chunks : 1) * sizeof *v);
	if (!v)
		return ckpt_fail(CKPT_E_NOMEM, "out of memory");
	for (uint32_t i = 0; i < m->n_chunks; i++)
		v[i] = m->chunks[i].pack_id;
	qsort(v, m->n_chunks, sizeof *v, cmp_u32);
	size_t n = 0;
	for (uint32_t i = 0; i < m->n_chunks; i++)
		if (!n || v[n - 1] != v[i])
			v[n++] = v[i];
	*ids = v;
	return (long)n;
}

/* One thread of tier_parallel: items from the shared counter until none is left, one failed or
 * the caller canceled; the first failure's message is kept (messages are per thread). */
static void *par_thread(void *arg)
{
	struct tier_par *p = arg;
	for (;;) {
		pthread_mutex_lock(&p->mu);
		bool stop = p->rc || p->next >= p->n ||
			    (p->cancel && __atomic_load_n(p->cancel, __ATOMIC_ACQUIRE));
		size_t i = stop ? 0 : p->next++;
		pthread_mutex_unlock(&p->mu);
		if (stop)
			return NULL;
		int rc = p->one(p->ctx, i);
		pthread_mutex_lock(&p->mu);
		if (rc && !p->rc) {
			p->rc = rc;
			snprintf(p->msg, sizeof p->msg, "%s", ckpt_errmsg());
		}
		pthread_mutex_unlock(&p->mu);
	}
}

int tier_parallel(struct tier_par *p, unsigned threads)
{
	pthread_t th[TIER_MAX_THREADS];
	unsigned nt = (unsigned)MIN((size_t)MIN(MAX(threads, 1u), TIER_MAX_THREADS), p->n);
	unsigned started = 0;
	pthread_mutex_init(&p->mu, NULL);
	for (; started < nt; started++)
		if (pthread_create(&th[started], NULL, par_thread, p))
			break;
	if (!started)
		par_thread(p);
	for (unsigned i = 0; i < started; i++)
		pthread_join(th[i], NULL);
	pthread_mutex_destroy(&p->mu);
	if (p->rc)
		return ckpt_fail(-p->rc, "%s", p->msg);
	if (p->cancel && __atomic_load_n(p->cancel, __ATOMIC_ACQUIRE))
		return ckpt_fail(CKPT_E_CANCELED, "canceled");
	return 0;
}
