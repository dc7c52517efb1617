/* Finishing the read of one host read group: raw chunks read straight into the destination
 * (direct: planned before the read, placed and checked after it), the others decoded from the read
 * buffer (buffered), and the fall back to the buffer when the kernel refuses a direct read. Uses
 * pack.c. */
#include <errno.h>
#include <limits.h>
#include <stdlib.h>
#include <sys/uio.h>

#include <pthread.h>

#include "common/common.h"
#include "read/reader.h"
#include "read/read_int.h"
#include "store/store.h"

/* ---- direct reads: raw chunks straight into the destination ------------------------------ */
/* A raw record at pack offset off has its payload at P = off + REC_HDR_LEN .. E = P + raw_len and
 * ends at R = off + rec_span. One vectored read puts [off, H) in scratch (the header and the
 * first payload bytes), [H, M) in place in the destination and [M, R) in scratch, H and M being P
 * rounded up and E rounded down to the pack's blk; then the two scratch pieces are copied into
 * place and the digest is checked on the destination. O_DIRECT wants every file offset and length
 * a multiple of blk and every address a multiple of mem_align: scratch pieces are packed in
 * multiples of blk from a 4 KiB-aligned buffer, and destinations qualify when
 * (dst - P) % mem_align == 0 (the condition documented at reader1_restore). */
#define ALIGN_DOWN(x, a) ((x) & ~((uint64_t)(a) - 1))

static uint64_t cut_head(const struct pack_fd *p)
{
	return ALIGN_UP(REC_HDR_LEN, p->blk);
}

static uint64_t cut_mid_end(const struct pack_fd *p, const struct mf_chunk *c)
{
	return ALIGN_DOWN(REC_HDR_LEN + (uint64_t)c->raw_len, p->blk);
}

/* Whether chunk c goes in place at d: raw, with a block-aligned middle, d aligned as it must. */
static bool chunk_direct(const struct pack_fd *p, const struct mf_chunk *c, const uint8_t *d)
{
	return c->codec == CKPT_CODEC_RAW && c->stored_len == c->raw_len &&
	       cut_mid_end(p, c) > cut_head(p) &&
	       ((uintptr_t)d - (c->offset + REC_HDR_LEN)) % p->mem_align == 0;
}

/* Plans the read of references [j0, j1) of t (one read group of pack p) with the chunks that
 * qualify in place at dst and the others (compressed, too small to have a middle, misaligned)
 * whole into scratch: fills x->iov and returns the number of segments, or 0 when the group
 * takes the buffer path (no chunk qualifies, too many segments, not enough scratch). */
int rd_direct_plan(const struct reader1 *r, struct rres *x, const struct pack_fd *p,
		   const struct mf_tensor *t, uint64_t j0, uint64_t j1, uint8_t *dst)
{
	if (!p->blk || (j1 - j0) * 3 > IOV_MAX || __atomic_load_n(&p->no_direct, __ATOMIC_RELAXED))
		return 0;
	if (!x->iov) {
		x->iov = malloc(IOV_MAX * sizeof *x->iov);
		x->iov_work = malloc(IOV_MAX * sizeof *x->iov_work);
		if (!x->iov || !x->iov_work) {
			free(x->iov);
			free(x->iov_work);
			x->iov = x->iov_work = NULL;
			return 0;
		}
	}
	uint64_t used = 0, h = cut_head(p);
	int n = 0, direct = 0;
	for (uint64_t q = j0; q < j1; q++) {
		const struct mf_chunk *c = &r->m.chunks[r->m.refs[t->first_ref + q]];
		uint64_t m = cut_mid_end(p, c), span = rec_span(c->stored_len);
		uint8_t *d = dst + q * r->m.chunk_size;
		if (!chunk_direct(p, c, d)) {
			if (used + span > r->buf_cap)
				return 0;
			x->iov[n++] = (struct iovec){x->buf + used, span};
			used += span;
			continue;
		}
		if (used + h + (span - m) > r->buf_cap)
			return 0;
		direct++;
		x->iov[n++] = (struct iovec){x->buf + used, h};
		used += h;
		x->iov[n++] = (struct iovec){d + (h - REC_HDR_LEN), m - h};
		if (span > m) {
			x->iov[n++] = (struct iovec){x->buf + used, span - m};
			used += span - m;
		}
	}
	return direct ? n : 0;
}

/* After the read planned by rd_direct_plan: checks each record's header; for a chunk read in place,
 * copies the scratch pieces of its payload into place and checks its digest there; decodes the
 * others from scratch. */
static int direct_finish(struct reader1 *r, struct rres *x, const struct pack_fd *p,
			 const struct mf_tensor *t, uint64_t j0, uint64_t j1, uint8_t *dst)
{
	uint64_t used = 0, h = cut_head(p), direct = 0;
	char path[4096];
	rd_pack_name(r, p, p->id, path, sizeof path);
	for (uint64_t q = j0; q < j1; q++) {
		const struct mf_chunk *c = &r->m.chunks[r->m.refs[t->first_ref + q]];
		uint64_t m = cut_mid_end(p, c), span = rec_span(c->stored_len);
		uint8_t *d = dst + q * r->m.chunk_size;
		const uint8_t *head = x->buf + used, *tail = head + h;
		int rc;
		if (!chunk_direct(p, c, d)) {
			rc = rd_check_record(r, x->codec, head, c, d, path);
			used += span;
		} else if (!(rc = rd_check_hdr(head, c, path))) {
			memcpy(d, head + REC_HDR_LEN, h - REC_HDR_LEN);
			memcpy(d + (m - REC_HDR_LEN), tail, REC_HDR_LEN + c->raw_len - m);
			rc = rd_check_digest(d, c, path);
			used += h + (span - m);
			direct++;
		}
		if (rc) {
			rd_tensor_error(r, t, q);
			return rc;
		}
	}
	pthread_mutex_lock(&r->mu);
	r->direct_chunks += direct;
	r->buffered_chunks += (j1 - j0) - direct;
	pthread_mutex_unlock(&r->mu);
	return 0;
}

void reader_path_counts(const reader1 *r, uint64_t *direct, uint64_t *buffered)
{
	pthread_mutex_lock((pthread_mutex_t *)&r->mu);
	*direct = r->direct_chunks;
	*buffered = r->buffered_chunks;
	pthread_mutex_unlock((pthread_mutex_t *)&r->mu);
}

/* After the buffer read of references [j0, j1) of t from pack p into x->buf: checks and decodes
 * each record into out (raw bytes back to back). */
int rd_group_decode(struct reader1 *r, struct rres *x, const struct pack_fd *p,
		    const struct mf_tensor *t, uint64_t j0, uint64_t j1, uint8_t *out)
{
	pthread_mutex_lock(&r->mu);
	r->buffered_chunks += j1 - j0;
	pthread_mutex_unlock(&r->mu);
	uint64_t at = 0, raw = 0;
	char path[4096];
	rd_pack_name(r, p, p->id, path, sizeof path);
	for (uint64_t q = j0; q < j1; q++) {
		const struct mf_chunk *cq = &r->m.chunks[r->m.refs[t->first_ref + q]];
		int rc = rd_check_record(r, x->codec, x->buf + at, cq, out + raw, path);
		if (rc) {
			rd_tensor_error(r, t, q);
			return rc;
		}
		at += rec_span(cq->stored_len);
		raw += cq->raw_len;
	}
	return 0;
}

/* Finishes the read of a host group that returned n (planned with niov direct segments, 0: the
 * buffer) as rd_restore_group does: a vectored read refused with EINVAL (the segments met statx's
 * alignment and the kernel still refused them) is read again through the buffer and the pack
 * keeps the buffer path from now on: never fail a restore for it. */
int rd_group_finish(struct reader1 *r, struct rres *x, struct pack_fd *p,
		    const struct mf_tensor *t, uint64_t j0, uint64_t j1, uint64_t len,
		    uint8_t *dst, int niov, ssize_t n)
{
	const struct mf_chunk *c = &r->m.chunks[r->m.refs[t->first_ref + j0]];
	int rc;
	if (niov && n == -EINVAL) {
		__atomic_store_n(&p->no_direct, 1, __ATOMIC_RELAXED);
		niov = 0;
		rc = rd_read_group(r, x, p, c->offset, (size_t)len);
	} else {
		rc = rd_read_result(r, p, c->offset, (size_t)len, n);
	}
	if (rc) {
		rd_tensor_error(r, t, j0);
		return rc;
	}
	if (niov)
		return direct_finish(r, x, p, t, j0, j1, dst);
	return rd_group_decode(r, x, p, t, j0, j1, dst + j0 * r->m.chunk_size);
}
