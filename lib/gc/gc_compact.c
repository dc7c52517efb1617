/* Pack compaction: chooses the partly dead packs to compact under a gc_rules, copies their
 * live records (each checked) into new packs, durably, points the manifests at them (one atomic
 * rewrite each) and removes the old packs last, unless an open reader still needs them. */
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <unistd.h>

#include "common/common.h"
#include "format/codec.h"
#include "gc/gc_int.h"
#include "store/lease.h"
#include "store/store.h"

/* Whether an open reader may still read pack id (compaction leaves the old pack to a later gc
 * then, and counts it in rep). Sets *rc on failure to read the leases. */
static bool reader_needs(struct ckpt_store *s, uint32_t id, gc_report *rep, int *rc)
{
	struct lease_set ls;
	*rc = lease_scan(s, &ls);
	bool needed = *rc || lease_needs(&ls, id);
	if (needed && !*rc)
		gc_defer(rep, &ls);
	lease_set_free(&ls);
	return needed;
}

/* One pack chosen for compaction: its live records go to the new pack new_id. */
struct cpk {
	const struct pk *p;
	uint32_t new_id;
	size_t first, last; /* its locations in the sorted location list: [first, last) */
	uint64_t *newoff;   /* new offset of each of them */
	uint64_t at;        /* bytes written to the new pack */
	bool made;          /* the new pack file exists */
};

static int cmp_cpk(const void *a, const void *b)
{
	const struct cpk *x = a, *y = b;
	return x->p->id < y->p->id ? -1 : x->p->id > y->p->id;
}

/* Scratch of one compaction run, allocated once. */
struct cbufs {
	uint8_t *buf, *raw;
	ckpt_codec_ctx *codec;
	const gc_rules *g; /* for its progress callback */
	uint64_t done, total;    /* record bytes copied, to copy */
};

/* Checks the record read into b->buf from src at off (header, then the digest of its payload). */
static int check_record(struct cbufs *b, const char *src, uint64_t off, struct rec_hdr *h)
{
	int rc = rec_hdr_decode(b->buf, REC_HDR_LEN, h, src);
	if (!rc)
		rc = ckpt_codec_decode(b->codec, h->codec, b->buf + REC_HDR_LEN, h->stored_len, b->raw,
				       h->raw_len);
	if (!rc) {
		ckpt_digest d;
		ckpt_digest_of(b->raw, h->raw_len, &d);
		if (!ckpt_digest_eq(&d, &h->digest))
			rc = ckpt_fail(CKPT_E_CHECKSUM, "%s: digest mismatch at offset %llu", src,
				       (unsigned long long)off);
	}
	return rc;
}

/* Copies the live records of c->p into the new pack c->new_id, each checked first. The new pack
 * is durable (data and directory entry) when it returns 0. */
static int compact_copy(struct ckpt_store *s, const struct loc *l, struct cpk *c, struct cbufs *b,
			gc_report *rep)
{
	char src[4096], dst[4096];
	store_pack_path(s, c->p->dir, c->p->id, src, sizeof src);
	store_pack_path(s, c->p->dir, c->new_id, dst, sizeof dst);
	int in = open(src, O_RDONLY | O_CLOEXEC);
	if (in < 0) {
		int e = errno;
		return ckpt_fail(ckpt_errno_code(e), "open %s: %s", src, strerror(e));
	}
	int outfd = open(dst, O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0644);
	if (outfd < 0) {
		int e = errno;
		close(in);
		return ckpt_fail(ckpt_errno_code(e), "create %s: %s", dst, strerror(e));
	}
	c->made = true;
	struct pack_hdr ph = {.version = CKPT_FORMAT_VERSION, .pack_id = c->new_id,
			      .created = ckpt_wall_ns() / 1000000000,
			      .nonce = ckpt_random64()};
	memcpy(ph.uuid, s->hdr.uuid, 16);
	pack_hdr_encode(&ph, b->buf);
	int rc = io_write_all(&ckpt_io_psync, outfd, b->buf, PACK_HDR_LEN, 0, dst);
	c->at = PACK_HDR_LEN;
	for (size_t i = c->first; !rc && i < c->last; i++) {
		if (i > c->first && l[i].offset == l[i - 1].offset) {
			c->newoff[i - c->first] = c->newoff[i - c->first - 1];
			continue;
		}
		struct rec_hdr h;
		rc = io_read_all(&ckpt_io_psync, in, b->buf, l[i].span, l[i].offset, src);
		if (!rc)
			rc = check_record(b, src, l[i].offset, &h);
		if (rc) {
			ckpt_fail_prefix("compacting %s (left in place; run verify)", src);
			break;
		}
		h.pack_id = c->new_id;
		rec_hdr_encode(&h, b->buf);
		rc = io_write_all(&ckpt_io_psync, outfd, b->buf, l[i].span, c->at, dst);
		gc_kill_point();
		c->newoff[i - c->first] = c->at;
		c->at += l[i].span;
		rep->bytes_copied += l[i].span;
		b->done += l[i].span;
		if (b->g->on_progress)
			b->g->on_progress(b->done, b->total, b->g->progress_arg);
	}
	if (!rc && fdatasync(outfd))
		rc = ckpt_fail(CKPT_E_IO, "fdatasync %s: %s", dst, strerror(errno));
	close(in);
	close(outfd);
	if (!rc)
		rc = io_fsync_dir(s->layout.pack_dirs[c->p->dir]);
	return rc;
}

/* Points every manifest (not skipped) at the new packs: one atomic rewrite per manifest, however
 * many of its packs moved. Counts the manifests written in *written. */
static int rewrite_manifests(struct ckpt_store *s, struct mfset *ms, const bool *skip,
			     const struct cpk *cv, size_t nc, const struct loc *l, uint64_t *written)
{
	for (size_t m = 0; m < ms->n; m++) {
		if (ms->err[m] || (skip && skip[m]))
			continue;
		struct manifest *mf = &ms->m[m];
		bool changed = false;
		for (uint32_t k = 0; k < mf->n_chunks; k++) {
			struct mf_chunk *ch = &mf->chunks[k];
			struct pk key = {.id = ch->pack_id};
			struct cpk ck = {.p = &key};
			const struct cpk *c = bsearch(&ck, cv, nc, sizeof *cv, cmp_cpk);
			if (!c)
				continue;
			size_t lo = c->first, hi = c->last;
			while (lo < hi) {
				size_t mid = (lo + hi) / 2;
				if (l[mid].offset < ch->offset)
					lo = mid + 1;
				else
					hi = mid;
			}
			ch->pack_id = c->new_id;
			ch->offset = c->newoff[lo - c->first];
			changed = true;
		}
		if (!changed)
			continue;
		uint64_t len = manifest_encoded_len(mf);
		uint8_t *enc = malloc(len);
		if (!enc)
			return ckpt_fail(CKPT_E_NOMEM, "out of memory");
		manifest_encode(mf, enc);
		char name[64];
		store_mf_name(mf->step, name, sizeof name);
		int rc = io_write_atomic(s->layout.mf_dir, name, enc, len, NULL);
		gc_kill_point();
		free(enc);
		if (rc)
			return rc;
		(*written)++;
	}
	return 0;
}

/* Compacts the packs of cv (sorted by id): copies all of them first, then rewrites the manifests
 * once, then removes the old packs. A failed copy removes the new packs (nothing names them yet)
 * and leaves every old pack in place. */
static int compact_run(struct ckpt_store *s, struct mfset *ms, const bool *skip, struct cpk *cv,
		       size_t nc, const struct loc *l, const gc_rules *g, gc_report *rep)
{
	struct cbufs b = {ckpt_aligned_alloc(rec_span(CKPT_MAX_CHUNK + 65536)), malloc(CKPT_MAX_CHUNK),
			  ckpt_codec_ctx_create(CKPT_MAX_CHUNK), g, 0, 0};
	for (size_t i = 0; i < nc; i++)
		b.total += cv[i].p->live;
	int rc = 0;
	if (!b.buf || !b.raw || !b.codec)
		rc = ckpt_fail(CKPT_E_NOMEM, "out of memory");
	for (size_t i = 0; !rc && i < nc; i++)
		rc = compact_copy(s, l, &cv[i], &b, rep);
	uint64_t written = 0;
	if (!rc)
		rc = rewrite_manifests(s, ms, skip, cv, nc, l, &written);
	rep->manifests_rewritten += written;
	gc_kill_point();
	bool touched[MAX_DATA_DIRS + 1] = {false};
	for (size_t i = 0; i < nc; i++) {
		char p[4096];
		if (rc) {
			/* Unless a manifest names them already, the new packs are only garbage. */
			store_pack_path(s, cv[i].p->dir, cv[i].new_id, p, sizeof p);
			if (cv[i].made && !written)
				unlink(p);
			continue;
		}
		/* A save that began during the copy may have loaded the old manifests: it spares
		 * the old pack as an open reader does. */
		bool saving = gc_save_in_flight(s, false, rep, &rc);
		if (saving || reader_needs(s, cv[i].p->id, rep, &rc)) {
			/* An open reader may still read it (counted deferred), or a save in flight
			 * reference it: no manifest names it now, so a later gc removes it as
			 * unreferenced. */
			if (!rc) {
				rep->packs_compacted++;
				if (saving)
					rep->packs_spared++;
			}
			continue;
		}
		store_pack_path(s, cv[i].p->dir, cv[i].p->id, p, sizeof p);
		if (unlink(p)) {
			rc = ckpt_fail(CKPT_E_IO, "remove %s: %s", p, strerror(errno));
			continue;
		}
		gc_kill_point();
		touched[cv[i].p->dir] = true;
		rep->packs_compacted++;
		rep->bytes_freed += cv[i].p->size > cv[i].at ? cv[i].p->size - cv[i].at : 0;
	}
	for (unsigned d = 0; d < s->layout.ndirs; d++)
		if (touched[d]) {
			int r = io_fsync_dir(s->layout.pack_dirs[d]);
			rc = rc ? rc : r;
		}
	free(b.buf);
	free(b.raw);
	ckpt_codec_ctx_free(b.codec);
	return rc;
}

/* A pack gc may compact: partly live, and not shorter than its live records (such a pack is
 * damaged, verify names it; copying would only fail, removing it would lose what is left). */
static bool compactable(const struct pk *p)
{
	return p->live && p->size > PACK_HDR_LEN && p->live + PACK_HDR_LEN <= p->size;
}

static uint64_t dead_of(const struct pk *p)
{
	return p->size - p->live - PACK_HDR_LEN;
}

/* Marks in sel the packs to compact under policy g (see gc_rules). */
static void choose_packs(const struct pk *pv, size_t np, const gc_rules *g, bool *sel)
{
	uint64_t garbage = 0, bytes = 0;
	for (size_t i = 0; i < np; i++) {
		if (!pv[i].live)
			continue; /* removed whole */
		bytes += pv[i].size;
		if (!compactable(&pv[i]))
			continue;
		double share = (double)(pv[i].live + PACK_HDR_LEN) / (double)pv[i].size;
		sel[i] = share < g->compact_below;
		if (sel[i])
			bytes -= dead_of(&pv[i]);
		else
			garbage += dead_of(&pv[i]);
	}
	/* Most garbage first: the fewest bytes copied for the space given back. */
	while ((double)garbage > g->max_unused * (double)bytes) {
		size_t best = np;
		for (size_t i = 0; i < np; i++)
			if (!sel[i] && compactable(&pv[i]) && dead_of(&pv[i]) &&
			    (best == np || dead_of(&pv[i]) > dead_of(&pv[best])))
				best = i;
		if (best == np)
			break;
		sel[best] = true;
		garbage -= dead_of(&pv[best]);
		bytes -= dead_of(&pv[best]);
	}
}

/* What compacting the packs of sel would do, for a dry run. */
static void compact_predict(const struct mfset *ms, const bool *skip, const struct pk *pv,
			    size_t np, const bool *sel, gc_report *rep)
{
	for (size_t i = 0; i < np; i++)
		if (sel[i]) {
			rep->packs_compacted++;
			rep->bytes_copied += pv[i].live;
			rep->bytes_freed += dead_of(&pv[i]);
		}
	for (size_t m = 0; m < ms->n; m++) {
		bool uses = false;
		for (uint32_t c = 0; !ms->err[m] && !(skip && skip[m]) && !uses && c < ms->m[m].n_chunks;
		     c++) {
			const struct pk *p = gc_find_pk((struct pk *)pv, np, ms->m[m].chunks[c].pack_id);
			uses = p && sel[p - pv];
		}
		rep->manifests_rewritten += uses;
	}
}

/* Compaction under policy g after the dead packs are gone (pv, lv as gc_collect() made them). */
int gc_compact(struct ckpt_store *s, struct mfset *ms, const bool *skip, struct pk *pv,
	       size_t np, const struct loc *lv, size_t nl, const gc_rules *g, bool dry,
	       gc_report *rep)
{
	bool *sel = calloc(np + 1, sizeof *sel);
	struct cpk *cv = calloc(np + 1, sizeof *cv);
	int rc = 0;
	if (!sel || !cv)
		rc = ckpt_fail(CKPT_E_NOMEM, "out of memory");
	if (!rc)
		choose_packs(pv, np, g, sel);
	if (!rc && dry)
		compact_predict(ms, skip, pv, np, sel, rep);
	size_t nc = 0;
	uint32_t next_id = np ? pv[np - 1].id : 0, any_max = 0;
	/* New packs take ids above every file in the pack directories, ours or not. */
	if (!rc && !dry && !(rc = store_max_pack_id(s, &any_max)))
		next_id = MAX(next_id, any_max);
	for (size_t i = 0, k = 0; !rc && !dry && i < np; i++) {
		if (!sel[i])
			continue;
		struct cpk *c = &cv[nc++];
		c->p = &pv[i];
		c->new_id = ++next_id;
		while (k < nl && lv[k].pack < pv[i].id)
			k++;
		c->first = k;
		while (k < nl && lv[k].pack == pv[i].id)
			k++;
		c->last = k;
		if (!(c->newoff = calloc(c->last - c->first + 1, sizeof *c->newoff)))
			rc = ckpt_fail(CKPT_E_NOMEM, "out of memory");
	}
	if (!rc && nc)
		rc = compact_run(s, ms, skip, cv, nc, lv, g, rep);
	for (size_t i = 0; cv && i < nc; i++)
		free(cv[i].newoff);
	free(cv);
	free(sel);
	return rc;
}
