/* Rank 0's half of a multi-rank commit: read every part, check it is the one its rank reported
 * durable, merge the parts into one global manifest (format version 2) and commit it with one
 * atomic rename. See dist.c for the representation. */
#include <errno.h>
#include <inttypes.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <unistd.h>

#include "common/common.h"
#include "common/workers.h"
#include "dist/dist.h"
#include "dist/dist_layout.h"
#include "format/format.h"
#include "io/io.h"
#include "store/store.h"

/* One global tensor being assembled from the parts. */
struct gt {
	const char *name;       /* points into a part */
	char kind;              /* 'S' sharded, 'R' replicated */
	uint8_t dtype, ndim;
	uint64_t gshape[32];
	size_t npieces, cap;
	struct piece {
		unsigned rank;
		const struct mf_tensor *t;
		uint64_t off[32];   /* shard box offsets; [0] is the byte offset of a replica piece */
		uint32_t out;       /* S: index of the shard's tensor in the global manifest */
		unsigned k;         /* S: box k of the rank's flattened range (0: its only box) */
	} *p;
};

struct merge {
	struct ckpt_store *s;
	uint64_t step;
	unsigned n;
	struct manifest *parts;
	uint64_t **refbase;     /* per part, per tensor: first reference */
	struct gt *g;
	size_t ng, capg;
	/* Output. */
	struct mf_chunk *chunks;
	uint32_t nchunks;
	uint32_t **remap;       /* per part: chunk index -> global chunk index */
	struct mf_tensor *t;
	size_t nt, capt;
	uint32_t *refs;
	uint64_t nrefs;
	size_t capr;
	const struct dist_part_sum *sums;
	struct mf_meta *meta;
	size_t nmeta;
	const char *const *late; /* key, value, ...: rank 0's metadata set after submit */
	size_t nlate;
	char **owned;           /* strings the output owns */
	size_t nowned;
	bool pieces;            /* a rank holds several boxes of a tensor: format version 3 */
};

static int bad(const struct merge *m, unsigned r, const char *what)
{
	return ckpt_fail(CKPT_E_CORRUPT, "checkpoint %" PRIu64 ": part of rank %u: %s", m->step, r,
			 what);
}

#ifdef CKPT_TEST_HOOKS
/* Test builds: part files read by commits (tests/unit/dist/t-dist-storm: rank 0's only), and a hook
 * called with each part's rank before its read (tests/unit/dist/t-dist-wide: reads at once). */
unsigned long ckpt_test_part_reads;
void (*ckpt_test_part_hook)(unsigned rank);
#endif

/* Reads part r and checks it is the one its rank made durable (sums[r]); fills m->parts[r] and
 * m->refbase[r]. Thread-safe for distinct r. The chunk size is load_parts' to compare. */
static int load_part(struct merge *m, const struct dist_part_sum *sums, unsigned r)
{
	char p[4096];
#ifdef CKPT_TEST_HOOKS
	__atomic_add_fetch(&ckpt_test_part_reads, 1, __ATOMIC_RELAXED);
	if (ckpt_test_part_hook)
		ckpt_test_part_hook(r);
#endif
	dist_part_path(m->s, m->step, (int)r, p, sizeof p);
	uint8_t *buf;
	size_t len;
	int rc = io_slurp(p, MF_MAX_LEN, &buf, &len);
	if (rc) {
		ckpt_fail_prefix("checkpoint %" PRIu64 ": part of rank %u", m->step, r);
		return rc;
	}
	if (len != sums[r].size || len < 16 || memcmp(buf + len - 16, sums[r].digest, 16)) {
		free(buf);
		return ckpt_fail(CKPT_E_CORRUPT, "part %s is not the one rank %u made durable "
				 "(size or checksum differ)", p, r);
	}
	if ((rc = manifest_decode(buf, len, &m->parts[r], p))) {
		ckpt_fail_prefix("checkpoint %" PRIu64 ": part of rank %u", m->step, r);
		return rc;
	}
	const struct manifest *pm = &m->parts[r];
	if (memcmp(pm->uuid, m->s->hdr.uuid, 16) || pm->step != m->step)
		return bad(m, r, "store, step or chunk size differ from rank 0's");
	if (!(m->refbase[r] = calloc(pm->n_tensors + 1, sizeof **m->refbase)))
		return ckpt_fail(CKPT_E_NOMEM, "out of memory");
	uint64_t acc = 0;
	for (uint32_t i = 0; i < pm->n_tensors; i++) {
		m->refbase[r][i] = acc;
		acc += (pm->tensors[i].nbytes + pm->chunk_size - 1) / pm->chunk_size;
	}
	return 0;
}

/* load_parts' threads take the parts in rank order; the lowest rank that failed is the error,
 * whatever the threads' timing, and no part above it is handed out any more. */
struct loader {
	struct merge *m;
	const struct dist_part_sum *sums;
	pthread_mutex_t mu;
	unsigned next, err_rank;  /* err_rank: m->n while none failed */
	int err;
	char msg[1024];
};

struct load_task {
	struct task task;
	struct loader *l;
};

static void load_run(struct task *t)
{
	struct loader *l = ((struct load_task *)t)->l;
	for (;;) {
		pthread_mutex_lock(&l->mu);
		unsigned r = l->next < l->err_rank ? l->next++ : l->m->n;
		pthread_mutex_unlock(&l->mu);
		if (r >= l->m->n)
			return;
		int rc = load_part(l->m, l->sums, r);
		pthread_mutex_lock(&l->mu);
		if (rc && r < l->err_rank) {
			l->err_rank = r;
			l->err = rc;
			snprintf(l->msg, sizeof l->msg, "%s", ckpt_errmsg());
		}
		pthread_mutex_unlock(&l->mu);
	}
}

/* Parts at once: their reads wait on the (shared) file system more than on a core. */
#define LOAD_THREADS 16u

/* Reads and checks the n parts, LOAD_THREADS at a time (each thread runs load_run; one part
 * alone, or no thread to start, and the caller's thread reads them all). The error is the one a
 * reading in rank order would give: the lowest rank's. */
static int load_parts(struct merge *m, const struct dist_part_sum *sums)
{
	struct loader l = {.m = m, .sums = sums, .err_rank = m->n};
	struct load_task tk[LOAD_THREADS];
	pthread_mutex_init(&l.mu, NULL);
	unsigned nt = MIN(m->n, LOAD_THREADS);
	struct workers *w = nt > 1 ? workers_create(nt) : NULL;
	for (unsigned k = 0; k < LOAD_THREADS; k++)
		tk[k] = (struct load_task){.task.fn = load_run, .l = &l};
	for (unsigned k = 0; w && k < workers_count(w); k++)
		workers_submit(w, &tk[k].task); /* each runs until no part is left */
	workers_destroy(w);                     /* waits for them */
	if (!w)
		load_run(&tk[0].task);
	pthread_mutex_destroy(&l.mu);
	for (unsigned r = 1; r < l.err_rank; r++)
		if (m->parts[r].chunk_size != m->parts[0].chunk_size)
			return bad(m, r, "store, step or chunk size differ from rank 0's");
	return l.err ? ckpt_fail(-l.err, "%s", l.msg) : 0;
}

struct dref { ckpt_digest d; uint32_t part, idx; };

static int cmp_dref(const void *a, const void *b)
{
	return memcmp(&((const struct dref *)a)->d, &((const struct dref *)b)->d, 16);
}

/* The union of the parts' chunk tables, each digest once (ranks may write the same chunk). */
static int merge_chunks(struct merge *m)
{
	uint64_t total = 0;
	for (unsigned r = 0; r < m->n; r++)
		total += m->parts[r].n_chunks;
	if (total >= UINT32_MAX)
		return ckpt_fail(CKPT_E_INVAL, "checkpoint %" PRIu64 ": too many chunks", m->step);
	struct dref *v = malloc((total ? total : 1) * sizeof *v);
	m->chunks = malloc((total ? total : 1) * sizeof *m->chunks);
	if (!v || !m->chunks) {
		free(v);
		return ckpt_fail(CKPT_E_NOMEM, "out of memory");
	}
	size_t k = 0;
	for (unsigned r = 0; r < m->n; r++) {
		if (!(m->remap[r] = malloc((m->parts[r].n_chunks + 1) * sizeof **m->remap))) {
			free(v);
			return ckpt_fail(CKPT_E_NOMEM, "out of memory");
		}
		for (uint32_t c = 0; c < m->parts[r].n_chunks; c++)
			v[k++] = (struct dref){m->parts[r].chunks[c].digest, r, c};
	}
	qsort(v, k, sizeof *v, cmp_dref);
	for (size_t i = 0; i < k; i++) {
		if (!i || cmp_dref(&v[i - 1], &v[i]))
			m->chunks[m->nchunks++] = m->parts[v[i].part].chunks[v[i].idx];
		m->remap[v[i].part][v[i].idx] = m->nchunks - 1;
	}
	free(v);
	return 0;
}

/* The global tensor name, added when new; NULL when out of memory (the error is set). */
static struct gt *find_gt(struct merge *m, const char *name)
{
	for (size_t i = 0; i < m->ng; i++)
		if (!strcmp(m->g[i].name, name))
			return &m->g[i];
	if (ckpt_grow((void **)&m->g, &m->capg, m->ng + 1, sizeof *m->g))
		return NULL;
	struct gt *g = &m->g[m->ng++];
	memset(g, 0, sizeof *g);
	g->name = name;
	return g;
}

static char *own(struct merge *m, char *str);

/* Parses a part's description of one of its tensors into its global tensor (box k > 0 of a
 * flattened range: part tensor NAME#k, filed under NAME). */
static int classify(struct merge *m, unsigned r, const struct mf_tensor *t)
{
	const char *v = NULL;
	size_t kl = strlen(DIST_KEY);
	for (uint32_t i = 0; i < m->parts[r].n_meta && !v; i++) {
		const struct mf_meta *e = &m->parts[r].meta[i];
		if (!strncmp(e->key, DIST_KEY, kl) && !strcmp(e->key + kl, t->name))
			v = e->value;
	}
	struct dist_piece pd;
	if (!v || dist_parse_piece(v, t, &pd))
		return ckpt_fail(CKPT_E_CORRUPT, "checkpoint %" PRIu64 ": part of rank %u: tensor "
				 "%s has no valid shard description (%.200s)", m->step, r, t->name,
				 v ? v : "none");
	const char *gname = t->name;
	if (pd.piece && !(gname = own(m, strndup(t->name, dist_piece_suffix(t->name, pd.piece)))))
		return ckpt_fail(CKPT_E_NOMEM, "out of memory");
	struct gt *g = find_gt(m, gname);
	if (!g)
		return -CKPT_E_NOMEM;
	m->pieces |= pd.piece > 0;
	char kind = pd.kind;
	unsigned nd = pd.ndim;
	const uint64_t *gs = pd.gshape;
	if (g->npieces == 0) {
		g->kind = kind;
		g->dtype = t->dtype;
		g->ndim = (uint8_t)nd;
		memcpy(g->gshape, gs, nd * sizeof *gs);
	} else if (g->kind != kind || g->dtype != t->dtype || g->ndim != nd ||
		   memcmp(g->gshape, gs, nd * sizeof *gs)) {
		return ckpt_fail(CKPT_E_INVAL, "checkpoint %" PRIu64 ": tensor %s: rank %u's kind, "
				 "dtype or global shape differ from another rank's", m->step, gname, r);
	}
	int rc = ckpt_grow((void **)&g->p, &g->cap, g->npieces + 1, sizeof *g->p);
	if (rc)
		return rc;
	struct piece *pc = &g->p[g->npieces++];
	pc->rank = r;
	pc->t = t;
	pc->k = pd.piece;
	memcpy(pc->off, pd.off, sizeof pd.off);
	return 0;
}


static char *own(struct merge *m, char *str)
{
	char **o = str ? realloc(m->owned, (m->nowned + 1) * sizeof *o) : NULL;
	if (!o) {
		free(str);
		return NULL;
	}
	m->owned = o;
	o[m->nowned++] = str;
	return str;
}

/* Appends a tensor of the global manifest; its references are those of the pieces, in order. */
static int out_tensor(struct merge *m, const char *name, uint8_t dtype, uint8_t ndim,
		      uint64_t *shape, uint64_t nbytes, const struct piece *pcs, size_t np)
{
	int rc = ckpt_grow((void **)&m->t, &m->capt, m->nt + 1, sizeof *m->t);
	for (size_t i = 0; i < np && !rc; i++) {
		const struct manifest *pm = &m->parts[pcs[i].rank];
		const struct mf_tensor *t = pcs[i].t;
		uint64_t base = m->refbase[pcs[i].rank][t - pm->tensors];
		uint64_t nr = (t->nbytes + pm->chunk_size - 1) / pm->chunk_size;
		if ((rc = ckpt_grow((void **)&m->refs, &m->capr, m->nrefs + nr + 1, sizeof *m->refs)))
			break;
		for (uint64_t j = 0; j < nr; j++)
			m->refs[m->nrefs++] = m->remap[pcs[i].rank][pm->refs[base + j]];
	}
	if (rc)
		return rc;
	m->t[m->nt++] = (struct mf_tensor){.name = name, .name_len = (uint32_t)strlen(name),
					   .dtype = dtype, .ndim = ndim, .shape = shape,
					   .nbytes = nbytes};
	return 0;
}

static int cmp_piece_off(const void *a, const void *b)
{
	uint64_t x = ((const struct piece *)a)->off[0], y = ((const struct piece *)b)->off[0];
	return x < y ? -1 : x > y;
}

static uint64_t volume(unsigned nd, const uint64_t *shape)
{
	uint64_t v = 1;
	for (unsigned i = 0; i < nd; i++)
		v *= shape[i];
	return v;
}

/* The pieces of a replicated tensor must cover it exactly, in order. */
static int out_replicated(struct merge *m, struct gt *g)
{
	uint64_t nbytes = ckpt_dtype_size((ckpt_dtype)g->dtype) * volume(g->ndim, g->gshape), at = 0;
	qsort(g->p, g->npieces, sizeof *g->p, cmp_piece_off);
	for (size_t i = 0; i < g->npieces; i++) {
		if (g->p[i].off[0] != at)
			break;
		at += g->p[i].t->nbytes;
	}
	if (at != nbytes)
		return ckpt_fail(CKPT_E_INVAL, "checkpoint %" PRIu64 ": replicated tensor %s: the "
				 "replicas' pieces do not cover it (a replica missing, or replica "
				 "counts that differ)", m->step, g->name);
	return out_tensor(m, g->name, g->dtype, g->ndim, g->gshape, nbytes, g->p, g->npieces);
}

/* No two shards of g overlap: the layout's sweep (dist_find_overlap), the same rule the
 * readers apply to the global manifest, O(n log n) where the pairwise test was n^2. */
static int check_overlap(const struct merge *m, const struct gt *g)
{
	struct dist_box *b = malloc((g->npieces + 1) * sizeof *b);
	if (!b)
		return ckpt_fail(CKPT_E_NOMEM, "out of memory");
	for (size_t i = 0; i < g->npieces; i++)
		b[i] = (struct dist_box){g->p[i].off, g->p[i].t->shape};
	size_t x, y;
	int rc = dist_find_overlap(g->ndim, b, g->npieces, &x, &y);
	free(b);
	if (rc == 1)
		rc = ckpt_fail(CKPT_E_INVAL, "checkpoint %" PRIu64 ": tensor %s: the shards of ranks "
			       "%u and %u overlap", m->step, g->name, MIN(g->p[x].rank, g->p[y].rank),
			       MAX(g->p[x].rank, g->p[y].rank));
	return rc;
}

/* The shards must tile the global tensor: no overlap, and their volumes add up to it. Each
 * becomes a tensor NAME@RANK; the shard table goes into the metadata. */
static int out_sharded(struct merge *m, struct gt *g)
{
	uint64_t vol = 0;
	int rc = check_overlap(m, g);
	if (rc)
		return rc;
	for (size_t i = 0; i < g->npieces; i++)
		vol += volume(g->ndim, g->p[i].t->shape);
	if (vol != volume(g->ndim, g->gshape))
		return ckpt_fail(CKPT_E_INVAL, "checkpoint %" PRIu64 ": tensor %s: the shards do not "
				 "cover the global shape", m->step, g->name);
	size_t cap = 64 + (size_t)(g->npieces + 1) * (g->ndim + 1) * 21, l = 0;
	char *v = own(m, malloc(cap));
	if (!v)
		return ckpt_fail(CKPT_E_NOMEM, "out of memory");
	l += (size_t)snprintf(v + l, cap - l, "%u %u", g->dtype, g->ndim);
	for (unsigned d = 0; d < g->ndim; d++)
		l += (size_t)snprintf(v + l, cap - l, " %" PRIu64, g->gshape[d]);
	l += (size_t)snprintf(v + l, cap - l, " %zu", g->npieces);
	for (size_t i = 0; i < g->npieces; i++) {
		const struct piece *pc = &g->p[i];
		size_t nl = strlen(g->name) + 32;
		char *name = own(m, malloc(nl));
		if (!name)
			return ckpt_fail(CKPT_E_NOMEM, "out of memory");
		if (pc->k)
			snprintf(name, nl, "%s@%u#%u", g->name, pc->rank, pc->k);
		else
			snprintf(name, nl, "%s@%u", g->name, pc->rank);
		l += (size_t)snprintf(v + l, cap - l, " %zu", m->nt);
		for (unsigned d = 0; d < g->ndim; d++)
			l += (size_t)snprintf(v + l, cap - l, " %" PRIu64, pc->off[d]);
		rc = out_tensor(m, name, pc->t->dtype, pc->t->ndim, pc->t->shape, pc->t->nbytes,
				    pc, 1);
		if (rc)
			return rc;
	}
	size_t kl = strlen(DIST_SHARDS) + strlen(g->name) + 1;
	char *k = own(m, malloc(kl));
	if (!k)
		return ckpt_fail(CKPT_E_NOMEM, "out of memory");
	snprintf(k, kl, "%s%s", DIST_SHARDS, g->name);
	m->meta[m->nmeta++] = (struct mf_meta){k, v, (uint32_t)strlen(k), (uint32_t)strlen(v)};
	return 0;
}

static int add_meta(struct merge *m, char *k, char *v)
{
	if (!own(m, k) || !own(m, v))
		return ckpt_fail(CKPT_E_NOMEM, "out of memory");
	m->meta[m->nmeta++] = (struct mf_meta){k, v, (uint32_t)strlen(k), (uint32_t)strlen(v)};
	return 0;
}

static bool late_has(const struct merge *m, const char *key, uint32_t klen)
{
	for (size_t i = 0; i + 1 < m->nlate; i += 2)
		if (strlen(m->late[i]) == klen && !memcmp(m->late[i], key, klen))
			return true;
	return false;
}

/* Rank 0's user metadata (its late entries replacing those of the same key), the world size and
 * each part's size and checksum. */
static int merge_meta(struct merge *m)
{
	const struct manifest *p0 = &m->parts[0];
	if (!(m->meta = calloc(p0->n_meta + m->nlate / 2 + m->n + 1 + m->ng, sizeof *m->meta)))
		return ckpt_fail(CKPT_E_NOMEM, "out of memory");
	for (uint32_t i = 0; i < p0->n_meta; i++)
		if (strncmp(p0->meta[i].key, DIST_KEY, strlen(DIST_KEY)) &&
		    !late_has(m, p0->meta[i].key, p0->meta[i].klen))
			m->meta[m->nmeta++] = p0->meta[i];
	for (size_t i = 0; i + 1 < m->nlate; i += 2) /* the merge frees what it owns: copies */
		if (add_meta(m, strdup(m->late[i]), strdup(m->late[i + 1])))
			return ckpt_fail(CKPT_E_NOMEM, "out of memory");
	char *k = malloc(32), *v = malloc(32);
	if (k && v) {
		snprintf(k, 32, "%s", DIST_WORLD);
		snprintf(v, 32, "%u", m->n);
	}
	int rc = add_meta(m, k, v);
	for (unsigned r = 0; r < m->n && !rc; r++) {
		k = malloc(48);
		v = malloc(64);
		if (k && v) {
			snprintf(k, 48, "%s%u", DIST_PART, r);
			int l = snprintf(v, 64, "%" PRIu64 " ", m->sums[r].size);
			for (int b = 0; b < 16; b++)
				l += snprintf(v + l, (size_t)(64 - l), "%02x", m->sums[r].digest[b]);
		}
		rc = add_meta(m, k, v);
	}
	return rc;
}

static void merge_free(struct merge *m)
{
	for (unsigned r = 0; r < m->n; r++) {
		manifest_free(&m->parts[r]);
		free(m->refbase[r]);
		free(m->remap[r]);
	}
	for (size_t i = 0; i < m->ng; i++)
		free(m->g[i].p);
	for (size_t i = 0; i < m->nowned; i++)
		free(m->owned[i]);
	free(m->owned);
	free(m->parts);
	free(m->refbase);
	free(m->remap);
	free(m->g);
	free(m->chunks);
	free(m->t);
	free(m->refs);
	free(m->meta);
}

static int cmp_str(const void *a, const void *b)
{
	return strcmp(((const struct mf_tensor *)a)->name, ((const struct mf_tensor *)b)->name);
}

static int build(struct merge *m)
{
	int rc = merge_chunks(m);
	for (unsigned r = 0; r < m->n && !rc; r++)
		for (uint32_t i = 0; i < m->parts[r].n_tensors && !rc; i++)
			rc = classify(m, r, &m->parts[r].tensors[i]);
	if (!rc)
		rc = merge_meta(m);
	for (size_t i = 0; i < m->ng && !rc; i++)
		rc = m->g[i].kind == 'R' ? out_replicated(m, &m->g[i]) : out_sharded(m, &m->g[i]);
	if (rc || m->nt < 2)
		return rc;
	/* A shard's NAME@RANK must not meet another tensor's name. */
	struct mf_tensor *v = malloc(m->nt * sizeof *v);
	if (!v)
		return ckpt_fail(CKPT_E_NOMEM, "out of memory");
	memcpy(v, m->t, m->nt * sizeof *v);
	qsort(v, m->nt, sizeof *v, cmp_str);
	for (size_t i = 1; i < m->nt && !rc; i++)
		if (!strcmp(v[i - 1].name, v[i].name))
			rc = ckpt_fail(CKPT_E_INVAL, "checkpoint %" PRIu64 ": tensor name %s is used "
				       "twice (a shard is stored as NAME@RANK)", m->step, v[i].name);
	free(v);
	return rc;
}

static int commit(struct merge *m, int rank, void (*kill)(int))
{
	struct manifest g = {.version = m->pieces ? CKPT_MANIFEST_V_PIECES : CKPT_MANIFEST_V_DIST,
			     .step = m->step,
			     .time_ns = ckpt_wall_ns(), .chunk_size = m->parts[0].chunk_size,
			     .n_meta = (uint32_t)m->nmeta, .n_tensors = (uint32_t)m->nt,
			     .n_chunks = m->nchunks, .n_refs = m->nrefs, .meta = m->meta,
			     .chunks = m->chunks, .tensors = m->t, .refs = m->refs};
	memcpy(g.uuid, m->s->hdr.uuid, 16);
	for (unsigned r = 0; r < m->n; r++)
		g.new_bytes += m->parts[r].new_bytes;
	uint64_t len = manifest_encoded_len(&g);
	if (!len)
		return ckpt_fail(CKPT_E_INVAL, "checkpoint %" PRIu64 ": manifest would exceed 4 GiB",
				 m->step);
	uint8_t *buf = malloc(len);
	if (!buf)
		return ckpt_fail(CKPT_E_NOMEM, "out of memory");
	manifest_encode(&g, buf);
	char name[64];
	store_mf_name(m->step, name, sizeof name);
	kill(rank);
	/* Never over an existing manifest: the step's claim keeps a second job out, and should it
	 * fail (a lock that is local to a node on a shared mount) exactly one commit wins. */
	int linked;
	int rc = io_write_new(m->s->layout.mf_dir, name, buf, len, &linked);
	free(buf);
	if (rc == 1)
		return ckpt_fail(CKPT_E_EXISTS, "checkpoint %" PRIu64 " already exists in store %s "
				 "(another job committed it meanwhile); this save made no checkpoint",
				 m->step, m->s->path);
	if (rc && linked) {
		/* Visible but maybe not durable: the commit failed, so take it back. */
		char p[4096];
		snprintf(p, sizeof p, "%s/%s", m->s->layout.mf_dir, name);
		unlink(p);
		io_fsync_dir(m->s->layout.mf_dir);
	}
	kill(rank);
	return rc;
}

int dist_write_global(struct ckpt_store *s, uint64_t step, unsigned n,
		      const struct dist_part_sum *sums, const char *const *late, size_t nlate,
		      int rank, void (*kill)(int rank))
{
	struct merge m = {.s = s, .step = step, .n = n, .sums = sums, .late = late,
			  .nlate = nlate};
	m.parts = calloc(n, sizeof *m.parts);
	m.refbase = calloc(n, sizeof *m.refbase);
	m.remap = calloc(n, sizeof *m.remap);
	int rc = m.parts && m.refbase && m.remap ? 0 : ckpt_fail(CKPT_E_NOMEM, "out of memory");
	if (!rc)
		rc = load_parts(&m, sums);
	if (!rc)
		rc = build(&m);
	if (!rc)
		rc = commit(&m, rank, kill);
	if (m.parts)
		merge_free(&m);
	else {
		free(m.refbase);
		free(m.remap);
	}
	return rc;
}
