/* The save pipeline's PROCESS stage, on a worker, for each copied slab job of the head save: hash
 * what the copy did not, deduplicate against the store's index (a chunk it knows is referenced,
 * a new one joins the chunk table with a pending index entry), encode the new chunks (one codec
 * context per thread), lay their records out compacted in the slab, stamp their pack and offset,
 * and hand the job's write to the pack writer (pipe_pack.c). Calls down into the pack writer and
 * the scheduler only. */
#include "save/pipe_int.h"

#include <stdlib.h>

#include "format/codec.h"

/* ---- per-thread codec context --------------------------------------------------------------- */
static pthread_key_t codec_key;
static pthread_once_t codec_once = PTHREAD_ONCE_INIT;
struct tl_codec {
	ckpt_codec_ctx *ctx;
	size_t chunk;
	uint8_t *out;
};
static void tl_free(void *v)
{
	struct tl_codec *c = v;
	ckpt_codec_ctx_free(c->ctx);
	free(c->out);
	free(c);
}
static void codec_key_init(void) { pthread_key_create(&codec_key, tl_free); }

static struct tl_codec *thread_codec(size_t chunk)
{
	pthread_once(&codec_once, codec_key_init);
	struct tl_codec *c = pthread_getspecific(codec_key);
	if (c && c->chunk >= chunk)
		return c;
	if (c)
		tl_free(c);
	c = calloc(1, sizeof *c);
	if (c) {
		c->chunk = chunk;
		c->ctx = ckpt_codec_ctx_create(chunk);
		c->out = malloc(ckpt_codec_bound(chunk));
		if (!c->ctx || !c->out) {
			tl_free(c);
			c = NULL;
		}
	}
	pthread_setspecific(codec_key, c);
	return c;
}

struct newrec {
	uint32_t slot;
	uint64_t at;        /* position in the slab */
	uint32_t stored_len;
	uint8_t codec;
};

/* What process_task carries from stage to stage for one slab job. */
struct proc {
	struct slabjob *j;
	uint8_t *slab;
	struct tl_codec *tc;  /* NULL without compression */
	struct newrec *nr;    /* the job's new chunks, in slab order */
	size_t nnew;
	uint64_t w;           /* write cursor: bytes of records laid out */
	uint64_t hashed, reused, stored;
};

/* Appends c to the chunk table (index lock held); sets *slot. */
static int chunk_append(struct pipe_save *ps, const struct mf_chunk *c, uint32_t *slot)
{
	if (ps->nchunks >= UINT32_MAX)
		return ckpt_fail(CKPT_E_INVAL, "checkpoint has too many chunks");
	int rc = ckpt_grow((void **)&ps->chunks, &ps->capchunks, ps->nchunks + 1, sizeof *ps->chunks);
	if (rc)
		return rc;
	*slot = (uint32_t)ps->nchunks;
	ps->chunks[ps->nchunks++] = *c;
	return 0;
}

/* Stage 1, under the index lock (idx): a chunk known to the index (same digest and length) is
 * reused, else it joins the chunk table as new with a pending index entry. fl: its J_* flags.
 * Sets *is_new and the new slot. */
static int dedup_chunk(struct pipe_save *ps, struct ckpt_index *idx, uint8_t fl, uint64_t g,
		       struct mf_chunk *c, bool *is_new, uint32_t *slot)
{
	int rc = 0;
	*is_new = false;
	struct idx_entry *e = index_find(idx, &c->digest);
	bool known = e && e->c.raw_len == c->raw_len;
	if ((fl & J_SKIP) && !known) {
		/* Committed chunks only leave the index when the store is re-read, which never
		 * happens while a save of this handle is live. */
		rc = ckpt_fail(CKPT_E_CORRUPT, "dedup index lost a committed chunk");
	} else if (known) {
		if (e->gen != ps->gen) {
			struct mf_chunk ref = e->c;
			ref.flags = 0;
			rc = chunk_append(ps, &ref, &e->slot);
			e->gen = ps->gen;
		}
		ps->refs[g] = e->slot;
	} else {
		rc = chunk_append(ps, c, slot);
		if (!rc && !e) {
			e = index_put(idx, c);
			if (!e)
				rc = ckpt_fail(CKPT_E_NOMEM, "dedup index: out of memory");
			else {
				e->pending = 1;
				e->gen = ps->gen;
				e->slot = *slot;
			}
		}
		ps->refs[g] = *slot;
		*is_new = true;
	}
	return rc;
}

/* Stage 2, no lock: encodes a new chunk and lays its record out at the write cursor, compacted
 * over skipped and reused chunks and zero-padded to its span. */
static void lay_out_record(struct pipe_save *ps, struct proc *pr, size_t ti, uint8_t *rec,
			   size_t len)
{
	size_t sl = len;
	int codec = CKPT_CODEC_RAW;
	if (pr->tc)
		codec = ckpt_codec_encode(pr->tc->ctx, rec + REC_HDR_LEN, len,
					  ckpt_dtype_size(ps->t[ti].dtype), ps->level, pr->tc->out,
					  ckpt_codec_bound(len), &sl);
	uint8_t *dst = pr->slab + pr->w;
	if (codec != CKPT_CODEC_RAW)
		memcpy(dst + REC_HDR_LEN, pr->tc->out, sl);
	else if (dst != rec)
		memmove(dst + REC_HDR_LEN, rec + REC_HDR_LEN, len);
	uint64_t span = rec_span((uint32_t)sl);
	memset(dst + REC_HDR_LEN + sl, 0, span - REC_HDR_LEN - sl);
	struct newrec *n = &pr->nr[pr->nnew++];
	n->at = pr->w;
	n->codec = (uint8_t)codec;
	n->stored_len = (uint32_t)sl;
	pr->w += span;
	pr->stored += sl;
}

/* Stages 1 and 2 over every chunk of the job, in three passes: hash what the copy did not (no
 * lock), look every chunk up in one index lock section, lay the new ones out in order (no lock).
 * One lock section per job rather than one per chunk: with many workers the index lock was taken
 * nchunks + 1 times per slab. Hashing every chunk before the layout is safe: a record
 * only ever moves down, over chunks already hashed. */
static int process_chunks(struct pipe_save *ps, struct proc *pr)
{
	struct slabjob *j = pr->j;
	struct ckpt_store *s = ps->p->s;
	struct chunk_it it;
	size_t ti, len;
	uint64_t off, pos = 0, q;
	chunk_it_init(&it, ps, j);
	for (q = 0; chunk_next(&it, &ti, &off, &len); q++) {
		if (!(j->skip[q] & J_HASHED)) {
			ckpt_digest_of(pr->slab + pos + REC_HDR_LEN, len, &j->dig[q]);
			j->skip[q] |= J_HASHED;
		}
		pr->hashed += len;
		pos += rec_span((uint32_t)len);
	}
	int rc = 0;
	size_t nnew = 0;
	struct ckpt_index *idx = store_index_lock(s);
	chunk_it_init(&it, ps, j);
	for (q = 0; !rc && chunk_next(&it, &ti, &off, &len); q++) {
		struct mf_chunk c = {.raw_len = (uint32_t)len, .flags = MF_CHUNK_NEW, .digest = j->dig[q]};
		bool is_new;
		uint32_t slot = 0;
		rc = dedup_chunk(ps, idx, j->skip[q], j->first_chunk + q, &c, &is_new, &slot);
		if (!rc && is_new) {
			j->skip[q] |= J_NEW;
			pr->nr[nnew++].slot = slot;
		}
	}
	store_index_unlock(s);
	if (rc)
		return rc;
	pos = 0;
	chunk_it_init(&it, ps, j);
	for (q = 0; chunk_next(&it, &ti, &off, &len); q++) {
		if (j->skip[q] & J_NEW)
			lay_out_record(ps, pr, ti, pr->slab + pos, len); /* takes pr->nr[pr->nnew] */
		else
			pr->reused++;
		pos += rec_span((uint32_t)len);
	}
	return 0;
}

/* Stage 3, one index lock section per job: the new chunks get their pack, offset, codec and length in
 * the chunk table and the pending index entries, their record headers are encoded into the slab,
 * and the job's counters are added. */
static void stamp_records(struct pipe_save *ps, struct proc *pr, uint32_t pack_id, uint64_t base)
{
	struct ckpt_store *s = ps->p->s;
	struct ckpt_index *idx = store_index_lock(s);
	for (size_t k = 0; k < pr->nnew; k++) {
		const struct newrec *n = &pr->nr[k];
		struct mf_chunk *c = &ps->chunks[n->slot];
		c->codec = n->codec;
		c->stored_len = n->stored_len;
		c->pack_id = pack_id;
		c->offset = base + n->at;
		struct rec_hdr h = {.codec = c->codec, .digest = c->digest, .raw_len = c->raw_len,
				    .stored_len = c->stored_len, .pack_id = pack_id};
		rec_hdr_encode(&h, pr->slab + n->at);
		struct idx_entry *e = index_find(idx, &c->digest);
		if (e && e->pending && e->gen == ps->gen && e->slot == n->slot) {
			e->c.pack_id = pack_id;
			e->c.offset = c->offset;
			e->c.codec = c->codec;
			e->c.stored_len = c->stored_len;
		}
	}
	ps->st.chunks += pr->j->nchunks;
	ps->st.chunks_new += pr->nnew;
	ps->st.chunks_reused += pr->reused;
	ps->st.bytes_hashed += pr->hashed;
	ps->st.bytes_stored += pr->stored;
	store_index_unlock(s);
}

/* Releases a job that writes nothing (or failed before its write). */
static void job_abandon(struct slabjob *j, int rc)
{
	struct pipe_save *ps = j->ps;
	free(j->dig);
	free(j->skip);
	j->dig = NULL;
	j->skip = NULL;
	if (rc)
		pipe_set_error(ps, rc);
	pipe_job_finished(j, 0);
}

/* PROCESS: hash (unless the copy did), dedup, encode and compact the records, then stage 4: pick
 * the pack and send one write for the job's records. */
void pipe_process_task(struct task *t)
{
	struct slabjob *j = (struct slabjob *)t;
	struct pipe_save *ps = j->ps;
	struct pipe *p = ps->p;
	struct proc pr = {.j = j, .slab = p->pool.slabs[j->slab]};
	int rc = 0;
	if (save_failed(ps))
		goto out;
	if (!(pr.nr = malloc(j->nchunks * sizeof *pr.nr))) {
		rc = ckpt_fail(CKPT_E_NOMEM, "out of memory");
		goto out;
	}
	if (ps->compress && !(pr.tc = thread_codec(ps->chunk_size))) {
		rc = ckpt_fail(CKPT_E_NOMEM, "out of memory (codec)");
		goto out;
	}
	if ((rc = process_chunks(ps, &pr)))
		goto out;
	/* A pack is opened only when the job has something to write (a save that changes nothing
	 * writes nothing), and record headers get its id. */
	uint64_t base = 0;
	uint32_t pack_id = 0;
	if (pr.w && (rc = pipe_pick_pack(ps, pr.w, &j->pack, &pack_id, &base)))
		goto out;
	stamp_records(ps, &pr, pack_id, base);
	free(pr.nr);
	pr.nr = NULL;
	if (pr.w) {
		pipe_write_job(j, pr.w, base);
		return;
	}
out:
	free(pr.nr);
	job_abandon(j, rc);
}
