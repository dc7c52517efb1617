/* The multi-rank layout of a manifest (dist_layout.h). Rank 0's merge checks that the shards
 * tile each global tensor before it commits; this is the readers' side of the same rule, for a
 * manifest that did not come from there (damaged, forged): before it, the rows no shard covered
 * came back as zeros and two shards over the same rows as whichever was read last, silently, in
 * ckptctl verify, export and the Python load alike. */
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/common.h"
#include "dist/dist.h"
#include "dist/dist_layout.h"

/* DIST_WORLD = w: the number of ranks, within what a save accepts, with exactly one part record
 * DIST_PART R for each rank R below it, R written as the merge writes it (their values are
 * dist_verify_parts' to check: a bad one is that rank's damage). */
static int parse_world(const struct manifest *m, struct dist_layout *l, const char *w)
{
	const char *p = w;
	uint64_t n;
	size_t np = 0, kl = strlen(DIST_PART);
	if (dist_parse_u64(&p, DIST_MAX_RANKS, &n) || *p || n == 0)
		return ckpt_fail(CKPT_E_CORRUPT, "checkpoint %" PRIu64 ": %s = \"%.64s\" is not a "
				 "number of ranks (1 to %u)", m->step, DIST_WORLD, w, DIST_MAX_RANKS);
	for (uint32_t i = 0; i < m->n_meta; i++)
		np += !strncmp(m->meta[i].key, DIST_PART, kl);
	if (n != np)
		return ckpt_fail(CKPT_E_CORRUPT, "checkpoint %" PRIu64 ": %s = \"%s\" but the manifest "
				 "records %zu parts (%sN)", m->step, DIST_WORLD, w, np, DIST_PART);
	bool seen[DIST_MAX_RANKS] = {false};
	for (uint32_t i = 0; i < m->n_meta; i++) {
		const char *k = m->meta[i].key, *q = k + kl;
		uint64_t r;
		if (strncmp(k, DIST_PART, kl))
			continue;
		if (dist_parse_u64(&q, n - 1, &r) || *q || (k[kl] == '0' && k[kl + 1]) || seen[r])
			return ckpt_fail(CKPT_E_CORRUPT, "checkpoint %" PRIu64 ": metadata key %.80s is "
					 "not the only record of a rank below %s = %s", m->step, k,
					 DIST_WORLD, w);
		seen[r] = true;
	}
	l->world = (unsigned)n;
	return 0;
}

/* The rank R of shard tensor name, which must be g's name, '@' and a rank of this world written
 * as the merge writes it, then maybe "#k" (box k >= 1 of the rank's flattened range, *k; else
 * *k is 0); -1 otherwise. Writers put "#k" only into version 3 manifests, but the layout does
 * not ask the version (the dist reader sees the manifest through the public reader, which does
 * not say it): a version 2 table with pieces must tile its tensor all the same. */
static int shard_rank(const struct dist_layout *l, const struct dist_global *g, const char *name,
		      unsigned *k)
{
	size_t n = strlen(g->name);
	const char *p = name + n + 1;
	uint64_t r, kk = 0;
	char rk[24];
	*k = 0;
	if (strncmp(name, g->name, n) || name[n] != '@' || (p[0] == '0' && p[1] && p[1] != '#'))
		return -1;
	size_t rl = strcspn(p, "#");
	if (rl >= sizeof rk)
		return -1;
	memcpy(rk, p, rl);
	rk[rl] = 0;
	const char *q = rk;
	if (dist_parse_u64(&q, l->world - 1, &r) || *q)
		return -1;
	if (p[rl] == '#') {
		const char *s = p + rl + 1;
		if (s[0] == '0' || dist_parse_u64(&s, DIST_RANGE_PIECES - 1, &kk) || *s ||
		    kk == 0)
			return -1;
	}
	*k = (unsigned)kk;
	return (int)r;
}

/* Shard s of g: tensor index, box offsets; checks that its tensor is the one the table names and
 * that the box lies inside g. Returns 0, 1 for a syntax error (the caller names the value) or
 * -CKPT_E_CORRUPT with the problem (the caller prefixes the tensor). */
static int parse_shard(const struct manifest *m, const struct dist_layout *l,
		       struct dist_global *g, const char **p, bool *used, bool *ranks, size_t s)
{
	struct dist_shard *sh = &g->sh[s];
	uint64_t t;
	if (dist_parse_u64(p, m->n_tensors - 1, &t))
		return 1;
	for (unsigned i = 0; i < g->ndim; i++)
		if (dist_parse_u64(p, g->shape[i], &sh->off[i]))
			return 1;
	const struct mf_tensor *ti = &m->tensors[t];
	sh->tensor = (size_t)t;
	sh->len = ti->shape;
	if (used[t])
		return ckpt_fail(CKPT_E_CORRUPT, "shard %zu: tensor %" PRIu64 " (%s) is already a "
				 "shard of a global tensor", s, t, ti->name);
	used[t] = true;
	if (ti->dtype != g->dtype || ti->ndim != g->ndim)
		return ckpt_fail(CKPT_E_CORRUPT, "shard %zu: tensor %s is %s with %u dimensions, the "
				 "table says %s with %u", s, ti->name,
				 ckpt_dtype_name((ckpt_dtype)ti->dtype), ti->ndim,
				 ckpt_dtype_name(g->dtype), g->ndim);
	unsigned k;
	if ((sh->rank = shard_rank(l, g, ti->name, &k)) < 0 ||
	    (!k && ranks[sh->rank]))
		return ckpt_fail(CKPT_E_CORRUPT, "shard %zu: tensor %s is not %s@R for a rank R "
				 "below %u that holds no other shard of it (or %s@R#k for its box k "
				 "of a flattened range)", s,
				 ti->name, g->name, l->world, g->name);
	if (!k)
		ranks[sh->rank] = true;
	for (unsigned i = 0; i < g->ndim; i++)
		if (sh->len[i] > g->shape[i] - sh->off[i])
			return ckpt_fail(CKPT_E_CORRUPT, "shard %zu (rank %d, tensor %s): dimension %u, "
					 "%" PRIu64 " at %" PRIu64 " lies outside the global extent "
					 "%" PRIu64, s, sh->rank, ti->name, i, sh->len[i], sh->off[i],
					 g->shape[i]);
	return 0;
}

static uint64_t box_volume(const struct dist_global *g, const struct dist_shard *sh)
{
	uint64_t v = 1;
	for (unsigned i = 0; i < g->ndim; i++)
		v *= sh->len[i]; /* inside g, whose byte size did not overflow */
	return v;
}

static bool boxes_overlap(unsigned nd, const struct dist_box *a, const struct dist_box *b)
{
	for (unsigned i = 0; i < nd; i++)
		if (a->off[i] >= b->off[i] + b->len[i] || b->off[i] >= a->off[i] + a->len[i])
			return false;
	return true; /* also two scalars */
}

static bool box_empty(unsigned nd, const struct dist_box *b)
{
	for (unsigned i = 0; i < nd; i++)
		if (!b->len[i])
			return true;
	return false;
}

struct skey {
	uint64_t k;
	size_t i;
};

static int cmp_skey(const void *a, const void *b)
{
	const struct skey *x = a, *y = b;
	return x->k < y->k ? -1 : x->k > y->k ? 1 : (x->i > y->i) - (x->i < y->i);
}

/* The dimension along which the boxes have the most distinct offsets: the one that separates
 * them best, so that the sweep below compares the fewest pairs. Fills keys sorted along it. */
static unsigned sweep_dim(unsigned nd, const struct dist_box *b, size_t n, struct skey *keys)
{
	unsigned best = 0;
	size_t most = 0;
	for (unsigned d = 0; d < nd; d++) {
		for (size_t s = 0; s < n; s++)
			keys[s] = (struct skey){b[s].off[d], s};
		qsort(keys, n, sizeof *keys, cmp_skey);
		size_t distinct = n > 0;
		for (size_t s = 1; s < n; s++)
			distinct += keys[s].k != keys[s - 1].k;
		if (distinct > most) {
			most = distinct;
			best = d;
		}
	}
	for (size_t s = 0; s < n; s++)
		keys[s] = (struct skey){nd ? b[s].off[best] : 0, s};
	qsort(keys, n, sizeof *keys, cmp_skey);
	return best;
}

/* Sweep along dimension k (sweep_dim): the boxes in the order of their offsets in k, each
 * compared only with the earlier ones whose interval in k it meets (the active set). Cost
 * O(nd n log n + n a nd) for n boxes, a the most intervals in k that meet at one point: a is 1
 * for boxes split along one dimension (the common case) and min(p, q) for a p x q grid; the
 * worst case (long intervals disjoint only in other dimensions) is n^2 pair tests, with n at
 * most the world size (DIST_MAX_RANKS). The pairwise test it replaced in the merge was n^2
 * always: 65 k tests for 256 ranks, where the sweep does about 256. */
int dist_find_overlap(unsigned nd, const struct dist_box *b, size_t n, size_t *x, size_t *y)
{
	struct skey *keys = malloc((n + 1) * sizeof *keys);
	size_t *act = malloc((n + 1) * sizeof *act), na = 0;
	int rc = 0;
	if (!keys || !act) {
		free(keys);
		free(act);
		return ckpt_fail(CKPT_E_NOMEM, "out of memory");
	}
	unsigned k = sweep_dim(nd, b, n, keys);
	for (size_t s = 0; s < n && !rc; s++) {
		const struct dist_box *a = &b[keys[s].i];
		if (box_empty(nd, a))
			continue;
		for (size_t j = 0; j < na && !rc;) {
			const struct dist_box *o = &b[act[j]];
			if (nd && o->off[k] + o->len[k] <= a->off[k]) {
				act[j] = act[--na]; /* ends before a starts: before every later one too */
				continue;
			}
			if (boxes_overlap(nd, a, o)) {
				*x = act[j];
				*y = keys[s].i;
				rc = 1;
			}
			j++;
		}
		act[na++] = keys[s].i;
	}
	free(keys);
	free(act);
	return rc;
}

int dist_range_boxes(const char *what, unsigned nd, const uint64_t *g, uint64_t start,
		     uint64_t count, struct dist_range_box *b, size_t *n)
{
	uint64_t st[CKPT_MAX_DIMS + 1], vol = 1, end;
	*n = 0;
	if (nd > CKPT_MAX_DIMS)
		return ckpt_fail(CKPT_E_INVAL, "%s: %u dimensions (at most %d)", what, nd,
				 CKPT_MAX_DIMS);
	for (unsigned i = 0; i < nd; i++)
		if (__builtin_mul_overflow(vol, g[i], &vol))
			return ckpt_fail(CKPT_E_INVAL, "%s: the global shape's volume overflows", what);
	/* st[i]: the elements of one index of dimension i; each is at most vol when vol > 0 (an
	 * empty tensor holds only the empty range, and the loop below does not run) */
	st[nd] = 1;
	if (nd)
		st[nd - 1] = 1;
	for (unsigned i = nd; vol && i-- > 1;)
		st[i - 1] = st[i] * g[i];
	if (__builtin_add_overflow(start, count, &end) || end > vol)
		return ckpt_fail(CKPT_E_INVAL, "%s: elements [%" PRIu64 ", %" PRIu64 " + %" PRIu64
				 ") are outside the global tensor's %" PRIu64, what, start, start,
				 count, vol);
	/* Greedy: at each position, the outermost dimension j whose blocks (st[j] elements) the
	 * position is aligned to and the range still holds one of; as many of them as fit before
	 * the range ends or dimension j wraps. Each box ends where an alignment begins, so there
	 * are at most nd - 1 growing and nd shrinking steps. */
	for (uint64_t pos = start; pos < end;) {
		unsigned j = 0;
		while (j + 1 < nd && (pos % st[j] || pos + st[j] > end))
			j++;
		struct dist_range_box *x = &b[(*n)++];
		uint64_t rem = pos;
		for (unsigned i = 0; i < nd; i++) {
			x->off[i] = rem / st[i];
			rem %= st[i];
			x->len[i] = i < j ? 1 : g[i];
		}
		uint64_t k = nd ? MIN((end - pos) / st[j], g[j] - x->off[j]) : 1;
		if (nd)
			x->len[j] = k;
		x->elem = pos - start;
		pos += k * st[j];
	}
	return 0;
}

/* No two shards of g overlap (dist_find_overlap). */
static int check_overlap(const struct dist_global *g)
{
	struct dist_box *b = malloc((g->nsh + 1) * sizeof *b);
	if (!b)
		return ckpt_fail(CKPT_E_NOMEM, "out of memory");
	for (size_t s = 0; s < g->nsh; s++)
		b[s] = (struct dist_box){g->sh[s].off, g->sh[s].len};
	size_t x, y;
	int rc = dist_find_overlap(g->ndim, b, g->nsh, &x, &y);
	free(b);
	if (rc == 1)
		rc = ckpt_fail(CKPT_E_CORRUPT, "the shards of rank %d (shard %zu) and rank %d (shard "
			       "%zu) overlap", g->sh[x].rank, x, g->sh[y].rank, y);
	return rc;
}

/* The shards tile g exactly: inside it (parse_shard), no two overlapping, and so their volumes
 * add up to its volume exactly when every element is in one. */
static int check_tiling(const struct dist_global *g)
{
	int rc = check_overlap(g);
	if (rc)
		return rc;
	uint64_t sum = 0, want = 1;
	for (unsigned i = 0; i < g->ndim; i++)
		want *= g->shape[i];
	for (size_t s = 0; s < g->nsh; s++)
		sum += box_volume(g, &g->sh[s]); /* disjoint boxes inside g: at most want */
	if (sum != want)
		return ckpt_fail(CKPT_E_CORRUPT, "its %zu shards hold %" PRIu64 " of its %" PRIu64
				 " elements: the rest is in no shard", g->nsh, sum, want);
	return 0;
}

/* DIST_SHARDS NAME = "dtype ndim gshape... nshards (tensor-index offsets...)..." into g; every
 * tensor it names is marked in used, and ranks (l->world of them) holds at most one shard each. */
static int parse_table(const struct manifest *m, const struct dist_layout *l, const char *key,
		       const char *v, struct dist_global *g, bool *used, bool *ranks)
{
	const char *p = v;
	uint64_t dt, nd, nsh = 0;
	int rc = 1;
	g->name = key + strlen(DIST_SHARDS);
	if (dist_parse_u64(&p, UINT8_MAX, &dt) || dist_parse_u64(&p, CKPT_MAX_DIMS, &nd) ||
	    !ckpt_dtype_size((ckpt_dtype)dt))
		goto bad;
	g->dtype = (ckpt_dtype)dt;
	g->ndim = (unsigned)nd;
	g->nbytes = ckpt_dtype_size(g->dtype);
	for (unsigned i = 0; i < g->ndim; i++)
		if (dist_parse_u64(&p, UINT64_MAX, &g->shape[i]) ||
		    __builtin_mul_overflow(g->nbytes, g->shape[i], &g->nbytes))
			goto bad;
	/* One shard per rank at most, or one per box of its flattened range: the bound comes
	 * before the allocation. */
	uint64_t most = (uint64_t)l->world * DIST_RANGE_PIECES;
	if (dist_parse_u64(&p, MIN(most, m->n_tensors), &nsh) || nsh == 0 ||
	    !(g->sh = calloc(nsh, sizeof *g->sh)))
		goto bad;
	memset(ranks, 0, l->world * sizeof *ranks);
	for (rc = 0; g->nsh < nsh && !rc; g->nsh++)
		rc = parse_shard(m, l, g, &p, used, ranks, g->nsh);
	if (rc > 0 || (!rc && *p))
		goto bad;
	if (!rc)
		rc = check_tiling(g);
	if (rc)
		ckpt_fail_prefix("checkpoint %" PRIu64 ": tensor %s (%s)", m->step, g->name, key);
	return rc;
bad:
	if (nsh && !g->sh)
		return ckpt_fail(CKPT_E_NOMEM, "out of memory");
	return ckpt_fail(CKPT_E_CORRUPT, "checkpoint %" PRIu64 ": shard table of tensor %s is "
			 "invalid (%s = \"%.200s\")", m->step, g->name, key, v);
}

/* Every tensor no table names: a global tensor of its own (replicated, or a v1 checkpoint's). */
static int add_unsharded(const struct manifest *m, struct dist_layout *l, const bool *used)
{
	for (uint32_t i = 0; i < m->n_tensors; i++) {
		const struct mf_tensor *t = &m->tensors[i];
		if (used[i])
			continue;
		struct dist_global *g = &l->g[l->ng++];
		*g = (struct dist_global){.name = t->name, .dtype = (ckpt_dtype)t->dtype,
					  .ndim = t->ndim, .nbytes = t->nbytes, .nsh = 1,
					  .replicated = l->v2};
		memcpy(g->shape, t->shape, t->ndim * sizeof *t->shape);
		if (!(g->sh = calloc(1, sizeof *g->sh)))
			return ckpt_fail(CKPT_E_NOMEM, "out of memory");
		*g->sh = (struct dist_shard){.tensor = i, .rank = -1, .len = t->shape};
	}
	return 0;
}

int dist_layout_parse(const struct manifest *m, struct dist_layout *l)
{
	*l = (struct dist_layout){.world = 1};
	const char *w = NULL;
	size_t ntab = 0, kl = strlen(DIST_SHARDS);
	for (uint32_t i = 0; i < m->n_meta; i++) {
		ntab += !strncmp(m->meta[i].key, DIST_SHARDS, kl);
		if (!strcmp(m->meta[i].key, DIST_WORLD))
			w = m->meta[i].value;
	}
	bool *used = calloc((size_t)m->n_tensors + 1, sizeof *used);
	bool *ranks = calloc(DIST_MAX_RANKS, sizeof *ranks);
	l->g = calloc(ntab + m->n_tensors + 1, sizeof *l->g);
	int rc = used && ranks && l->g ? 0 : ckpt_fail(CKPT_E_NOMEM, "out of memory");
	l->v2 = w != NULL;
	if (!rc && w)
		rc = parse_world(m, l, w);
	for (uint32_t i = 0; i < m->n_meta && !rc; i++)
		if (!strncmp(m->meta[i].key, DIST_SHARDS, kl))
			rc = parse_table(m, l, m->meta[i].key, m->meta[i].value, &l->g[l->ng++], used,
					 ranks);
	if (!rc)
		rc = add_unsharded(m, l, used);
	free(used);
	free(ranks);
	return rc;
}

void dist_layout_free(struct dist_layout *l)
{
	for (size_t i = 0; l->g && i < l->ng; i++)
		free(l->g[i].sh);
	free(l->g);
	*l = (struct dist_layout){.world = 1};
}
