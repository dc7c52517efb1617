/* Restoring scattered runs of one tensor (rd_restore_runs, read/runs.h): what lib/dist's box
 * restore reads, the rows of a box in each shard it overlaps.
 *
 * A run is cut at chunk boundaries. The chunks it covers whole, when it is contiguous in the
 * destination, go in place as reader1_restore reads them (direct reads through the reader's
 * pipe, the spans of many rows in flight together; CUDA through the pinned staging, stage.c). What is left are pieces of chunks that several
 * rows share: they are queued while their chunks follow each other in one pack (one read group,
 * bounded as rd_group_end bounds it), then the group is read once, each record is checked (a raw
 * one where it lies in the read buffer, others decoded into the reader's scratch chunk; for CUDA
 * the group is decoded into the staging buffer) and its pieces are copied from there. So each
 * chunk is read once per call, chunks no row touches are not read, and no buffer of the rows'
 * byte span is allocated: the old box restore read the span (every chunk between a box's first
 * and last element, 4x the chunks of a column box of wide rows) into a temporary of its size.
 * The last chunk of a group stays readable after its group, for pieces queued after a full
 * queue. Uses restore.c, rpipe.c, stage.c, group.c and pack.c. */
#include <stdlib.h>

#include <pthread.h>

#include "common/common.h"
#include "gpu/gpu.h"
#include "read/read_int.h"
#include "read/runs.h"
#include "store/store.h"

/* Pieces queued for one group at most: the group is read early (and its last chunk kept) when
 * more rows than that fall in it, so memory stays bounded whatever the row size. */
#define RUNS_QUEUE 4096
#define NO_CHUNK UINT64_MAX

/* Spans of whole chunks queued for the pipe (host) at most: then they are read. */
#define RUNS_SPANS 256

/* Chunks [j, end) of the tensor whose byte 0 would be at base (j moves on as they are read). */
struct span {
	uint64_t j, end;
	uint8_t *base;
};

/* len bytes at byte `at` of chunk q, to dst with elements step bytes apart. */
struct piece {
	uint64_t q, at, len;
	uint8_t *dst;
	uint64_t step;
};

struct runs {
	struct reader1 *r;
	const struct mf_tensor *t;
	size_t ti;
	uint64_t es, cs;
	int mem;
	const struct ckpt_gpu_ops *g; /* NULL: host memory */
	struct rres *x;               /* the reader's (rd_restore_begin) */
	uint64_t g0, g1, gmax, glen;  /* queued group: chunks [g0, g1), glen bytes on disk; may
				       * grow up to gmax */
	struct piece pc[RUNS_QUEUE];
	size_t npc;
	uint64_t kept;                /* the chunk kept_src holds after the last group, or NO_CHUNK */
	const uint8_t *kept_src;
	bool copying;                 /* CUDA copies queued since the last sync */
	struct span sp[RUNS_SPANS];   /* host: queued spans, the one being read is spk */
	size_t nsp, spk;
	uint64_t chunks, bytes;       /* chunks read, bytes restored (statistics) */
};

static const struct mf_chunk *chunk_of(const struct runs *rs, uint64_t q)
{
	return &rs->r->m.chunks[rs->r->m.refs[rs->t->first_ref + q]];
}

/* CUDA: waits for the copies queued out of the staging buffer before it is written again. */
static int drain(struct runs *rs)
{
	if (!rs->copying)
		return 0;
	rs->copying = false;
	return rs->g->stream_sync(rs->x->stream[rs->mem]);
}

/* Copies piece p out of src, the bytes of its chunk. */
static int copy_piece(struct runs *rs, const struct piece *p, const uint8_t *src)
{
	src += p->at;
	uint64_t n = p->step == rs->es ? 1 : p->len / rs->es, len = n == 1 ? p->len : rs->es;
	for (uint64_t k = 0; k < n; k++) {
		if (!rs->g) {
			memcpy(p->dst + k * p->step, src + k * len, len);
			continue;
		}
		int rc = rs->g->copy_h2d(p->dst + k * p->step, src + k * len, len,
					 rs->x->stream[rs->mem]);
		if (rc)
			return rc;
		rs->copying = true;
	}
	return 0;
}

/* Checks the record of host chunk q at rec; *src gets its bytes: in place for a raw record (no
 * copy), else decoded into the reader's scratch chunk. */
static int check_chunk(struct runs *rs, const struct pack_fd *p, uint64_t q, const uint8_t *rec,
		       const uint8_t **src)
{
	struct reader1 *r = rs->r;
	const struct mf_chunk *c = chunk_of(rs, q);
	char path[4096];
	rd_pack_name(r, p, c->pack_id, path, sizeof path);
	int rc;
	if (c->codec == CKPT_CODEC_RAW && c->stored_len == c->raw_len) {
		*src = rec + REC_HDR_LEN;
		if (!(rc = rd_check_hdr(rec, c, path)))
			rc = rd_check_digest(*src, c, path);
	} else {
		*src = r->scratch;
		rc = rd_check_record(r, rs->x->codec, rec, c, r->scratch, path);
	}
	if (rc)
		rd_tensor_error(r, rs->t, q);
	return rc;
}

/* Reads the queued group, checks every chunk of it and copies the queued pieces; its last chunk
 * stays in kept. */
static int flush(struct runs *rs)
{
	if (rs->g1 == rs->g0)
		return 0;
	struct reader1 *r = rs->r;
	const struct mf_chunk *c = chunk_of(rs, rs->g0);
	struct pack_fd *p;
	int rc = rd_group_pack(r, rs->t, rs->g0, c, &p);
	if (!rc && rs->g && !(rc = rd_restore_prepare(r, rs->x, rs->g, rs->mem)))
		rc = drain(rs);
	if (rc)
		return rc;
	if ((rc = rd_read_group(r, rs->x, p, c->offset, (size_t)rs->glen))) {
		rd_tensor_error(r, rs->t, rs->g0);
		return rc;
	}
	if (rs->g && (rc = rd_group_decode(r, rs->x, p, rs->t, rs->g0, rs->g1, rs->x->staging)))
		return rc;
	const uint8_t *src = NULL;
	uint64_t at = 0;
	size_t k = 0;
	for (uint64_t q = rs->g0; q < rs->g1; q++) {
		if (rs->g)
			src = rs->x->staging + (q - rs->g0) * rs->cs;
		else if ((rc = check_chunk(rs, p, q, rs->x->buf + at, &src)))
			return rc;
		at += rec_span(chunk_of(rs, q)->stored_len);
		for (; k < rs->npc && rs->pc[k].q == q && !rc; k++)
			rc = copy_piece(rs, &rs->pc[k], src);
		if (rc)
			return rc;
	}
	rs->chunks += rs->g1 - rs->g0;
	rs->kept = rs->g1 - 1;
	rs->kept_src = src;
	rs->g0 = rs->g1;
	rs->npc = 0;
	return 0;
}

/* Queues piece p (of chunk p->q, at or after every queued one), reading the queued group first
 * when p's chunk cannot join it. */
static int add_piece(struct runs *rs, const struct piece *p)
{
	if (p->q == rs->kept)
		return copy_piece(rs, p, rs->kept_src);
	bool open = rs->g1 > rs->g0 && rs->npc < RUNS_QUEUE;
	if (!(open && p->q == rs->g1 - 1) && !(open && p->q == rs->g1 && p->q < rs->gmax)) {
		int rc = flush(rs);
		if (rc)
			return rc;
		if (p->q == rs->kept)
			return copy_piece(rs, p, rs->kept_src);
		uint64_t len;
		rs->g0 = rs->g1 = p->q;
		rs->gmax = rd_group_end(rs->r, rs->t, p->q, &len);
		rs->glen = 0;
	}
	if (p->q == rs->g1) {
		rs->glen += rec_span(chunk_of(rs, p->q)->stored_len);
		rs->g1++;
	}
	rs->pc[rs->npc++] = *p;
	return 0;
}

/* Bytes [lo, hi) of run u as pieces, one per chunk. */
static int add_pieces(struct runs *rs, const struct rd_run *u, uint64_t lo, uint64_t hi)
{
	int rc = 0;
	while (lo < hi && !rc) {
		uint64_t q = lo / rs->cs, e = MIN(hi, (q + 1) * rs->cs);
		struct piece p = {.q = q, .at = lo - q * rs->cs, .len = e - lo,
				  .dst = u->dst + (lo - u->off) / rs->es * u->step, .step = u->step};
		rc = add_piece(rs, &p);
		lo = e;
	}
	return rc;
}

/* Host: the queued spans' chunks as the pipe's jobs, in order, in read groups. */
static bool spans_next(void *arg, struct rjob *out)
{
	struct runs *rs = arg;
	while (rs->spk < rs->nsp && rs->sp[rs->spk].j >= rs->sp[rs->spk].end)
		rs->spk++;
	if (rs->spk == rs->nsp)
		return false;
	struct span *p = &rs->sp[rs->spk];
	uint64_t len, k = rd_group_end_before(rs->r, rs->t, p->j, p->end, &len);
	*out = (struct rjob){.ti = rs->ti, .j0 = p->j, .j1 = k, .len = len, .mem = CKPT_MEM_HOST,
			     .dst = p->base};
	p->j = k;
	return true;
}

static int run_spans(struct runs *rs)
{
	if (!rs->nsp)
		return 0;
	int rc = rd_reader_pipe(rs->r);
	rs->spk = 0;
	if (!rc)
		rc = rpipe_run(rs->r->pipe, spans_next, rs);
	rs->nsp = 0;
	return rc;
}

/* Chunks [ja, jb), each covered whole by a run contiguous in the destination, restored in place:
 * byte b of the tensor goes to base + b. Host spans are queued and read through the pipe
 * together (their chunks are no piece's, and the pipe's slots have their own buffers), so that
 * the rows of a column box of wide rows are in flight at once, not read one after another. */
static int add_span(struct runs *rs, uint64_t ja, uint64_t jb, uint8_t *base)
{
	int rc = 0;
	rs->chunks += jb - ja;
	if (!rs->g) {
		if (rs->nsp == RUNS_SPANS)
			rc = run_spans(rs);
		rs->sp[rs->nsp++] = (struct span){.j = ja, .end = jb, .base = base};
		return rc;
	}
	if (!(rc = flush(rs)))
		rc = drain(rs); /* the pieces' copies first: rd_restore_group's follow on the stream */
	rs->kept = NO_CHUNK;
	for (uint64_t j = ja; j < jb && !rc;) {
		uint64_t len, k = rd_group_end_before(rs->r, rs->t, j, jb, &len);
		rc = rd_restore_group(rs->r, rs->x, rs->t, j, k, len, rs->mem, base);
		j = k;
	}
	return rc;
}

static int add_run(struct runs *rs, const struct rd_run *u)
{
	const struct mf_tensor *t = rs->t;
	uint64_t a = u->off, b = a + u->n * rs->es, cs = rs->cs;
	if (!u->n)
		return 0;
	if (b > t->nbytes || b < a)
		return ckpt_fail(CKPT_E_INVAL, "restore '%s': run of bytes %llu..%llu outside its "
				 "%llu bytes", t->name, (unsigned long long)a, (unsigned long long)b,
				 (unsigned long long)t->nbytes);
	rs->bytes += b - a;
	/* Whole chunks: from the first boundary at or after a to the last at or before b (the
	 * tensor's end counts: its last chunk may be short). */
	uint64_t ja = (a + cs - 1) / cs, jb = b == t->nbytes ? t->nrefs : b / cs;
	if (u->step != rs->es || ja >= jb)
		return add_pieces(rs, u, a, b);
	int rc = add_pieces(rs, u, a, ja * cs);
	if (!rc)
		rc = add_span(rs, ja, jb, (uint8_t *)((uintptr_t)u->dst - a));
	if (!rc)
		rc = add_pieces(rs, u, MIN(jb * cs, b), b);
	return rc;
}

int rd_restore_runs(reader1 *r, size_t ti, unsigned es, int mem, rd_run_fn next, void *arg)
{
	const struct mf_tensor *t = &r->m.tensors[ti];
	const uint64_t cs = r->m.chunk_size;
	if (!es || cs % es)
		return ckpt_fail(CKPT_E_UNSUPPORTED, "restore '%s': elements of %u bytes do not divide "
				 "its chunks of %llu", t->name, es, (unsigned long long)cs);
	const struct ckpt_gpu_ops *g = mem == CKPT_MEM_HOST ? NULL : ckpt_gpu_cuda();
	if (mem != CKPT_MEM_HOST && !g)
		return rd_check_mem(t->name, mem, NULL);
	struct runs *rs = calloc(1, sizeof *rs);
	if (!rs)
		return ckpt_fail(CKPT_E_NOMEM, "out of memory");
	int rc = rd_restore_begin(r);
	*rs = (struct runs){.r = r, .t = t, .ti = ti, .es = es, .cs = cs, .mem = mem, .g = g,
			    .x = r->res, .kept = NO_CHUNK};
	double t0 = ckpt_now();
	struct rd_run u;
	while (!rc && next(arg, &u))
		rc = add_run(rs, &u);
	if (!rc)
		rc = flush(rs);
	if (!rc)
		rc = run_spans(rs);
	int drc = drain(rs); /* on failure too: no copy may still read the staging buffer */
	int grc = rs->g ? rd_restore_drain(rs->x) : 0; /* rd_restore_group's copies, in flight */
	if (!rc)
		rc = drc ? drc : grc;
	if (!rc) {
		pthread_mutex_lock(&r->mu);
		r->st.logical_bytes += rs->bytes;
		r->st.chunks += rs->chunks;
		r->st.threads = MAX(r->st.threads, 1u);
		r->st.seconds += ckpt_now() - t0;
		pthread_mutex_unlock(&r->mu);
	}
	free(rs);
	return rc;
}
