/* The reader's pack cache and its record reads: packs opened (and their headers checked) on first
 * use, a read group's extent and pack, one read of a group waited for, and the checks of a record
 * against the manifest (header, payload digest). The lowest piece of the reader: every other one
 * reads through it. */
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include <pthread.h>

#include "format/codec.h"
#include "common/common.h"
#include "io/engine.h"
#include "read/read_int.h"
#include "store/store.h"

/* The alignment direct reads of pack fd need: none without O_DIRECT; with it, what statx reports
 * (STATX_DIOALIGN, Linux 6.1), else 4096 for both, which every device accepts. A unit above 4096
 * (records are 4 KiB aligned) leaves the pack to the buffer path (blk 0). */
static void pack_dio_align(struct pack_fd *p, int fd)
{
	int fl = fcntl(fd, F_GETFL);
	p->blk = p->mem_align = 1;
	if (fl < 0 || !(fl & O_DIRECT))
		return;
	p->blk = p->mem_align = 4096;
	struct statx sx;
	if (!statx(fd, "", AT_EMPTY_PATH, STATX_DIOALIGN, &sx) && (sx.stx_mask & STATX_DIOALIGN) &&
	    sx.stx_dio_offset_align && sx.stx_dio_mem_align) {
		p->blk = MAX(sx.stx_dio_offset_align, sx.stx_dio_mem_align);
		p->mem_align = sx.stx_dio_mem_align;
	}
	if (p->blk > 4096 || (p->blk & (p->blk - 1)) || (p->mem_align & (p->mem_align - 1)))
		p->blk = 0;
}

/* Returns the open pack, opening and checking its header on first use. */
struct pack_fd *rd_pack(struct reader1 *r, uint32_t id)
{
	for (size_t i = 0; i < r->nfds; i++)
		if (r->fds[i]->id == id)
			return r->fds[i];
	/* Entries are allocated one by one: restore threads keep pointers to them while the array
	 * grows. */
	struct pack_fd **n = realloc(r->fds, (r->nfds + 1) * sizeof *n);
	if (!n)
		return NULL;
	r->fds = n;
	struct pack_fd *p = calloc(1, sizeof *p);
	if (!p)
		return NULL;
	r->fds[r->nfds++] = p;
	memset(p, 0, sizeof *p);
	p->id = id;
	char path[4096];
	int fd = -1, rc = 0, e = ENOENT;
	/* A pack lives in one of the store's pack directories (striping). */
	errno = ENOENT;
	for (unsigned d = 0; d < r->s->layout.ndirs && fd < 0 && !store_remote_first(r->s); d++) {
		store_pack_path(r->s, d, id, path, sizeof path);
		if (r->s->opt.direct_io)
			fd = open(path, O_RDONLY | O_CLOEXEC | O_DIRECT);
		if (fd < 0)
			fd = open(path, O_RDONLY | O_CLOEXEC);
		if (fd < 0 && errno != ENOENT)
			break;
		if (fd >= 0)
			p->dir = d;
	}
	if (fd < 0 && errno == ENOENT && store_remote_reads(r->s)) {
		/* Not local: the records this checkpoint needs, from the remote (lib/tier). */
		fd = store_remote_pack(r->s, &r->m, id, path, sizeof path);
		if (fd < 0)
			rc = fd;
		p->remote = fd >= 0;
		p->where = strdup(path); /* NULL (out of memory): the local name, as before */
	}
	if (rc) {
		/* the remote's error (naming the object), kept below */
	} else if (fd < 0 && errno == ENOENT && r->s->layout.ndirs > 1) {
		/* Striped store: say where it was looked for. */
		char where[2048] = "";
		for (unsigned d = 0; d < r->s->layout.ndirs; d++) {
			size_t used = strlen(where);
			snprintf(where + used, sizeof where - used, "%s%s", d ? ", " : "",
				 r->s->layout.pack_dirs[d]);
		}
		rc = ckpt_fail(CKPT_E_CORRUPT, "pack %08u.pack: missing (looked in %s)", id, where);
	} else if (fd < 0) {
		e = errno;
		store_pack_path(r->s, 0, id, path, sizeof path);
		/* Permission denied is not damage: say which (verify reports it apart). */
		rc = ckpt_fail(e == ENOENT ? CKPT_E_CORRUPT : e == EACCES || e == EPERM ? CKPT_E_PERM :
			       CKPT_E_IO, "pack %s: %s", path, e == ENOENT ? "missing" : strerror(e));
	} else {
		pack_dio_align(p, fd);
		struct pack_hdr h;
		rc = io_read_all(ckpt_io_default(), fd, r->buf, PACK_HDR_LEN, 0, path);
		if (!rc)
			rc = pack_hdr_decode(r->buf, PACK_HDR_LEN, &h, path);
		if (!rc && (h.pack_id != id || memcmp(h.uuid, r->s->hdr.uuid, 16)))
			rc = ckpt_fail(CKPT_E_CORRUPT, "%s: pack header names another pack or store",
				       path);
		if (!rc)
			r->st.bytes_read += PACK_HDR_LEN;
	}
	if (rc) {
		if (fd >= 0)
			close(fd);
		fd = -1;
		p->err = rc;
		p->msg = strdup(ckpt_errmsg());
	}
	p->fd = fd;
	return p;
}

void rd_packs_close(struct reader1 *r)
{
	for (size_t i = 0; i < r->nfds; i++) {
		if (r->fds[i]->fd >= 0)
			close(r->fds[i]->fd);
		free(r->fds[i]->msg);
		free(r->fds[i]->where);
		free(r->fds[i]);
	}
	free(r->fds);
}

/* Checks a record's header (REC_HDR_LEN bytes at rec) against the manifest's chunk c. */
int rd_check_hdr(const uint8_t *rec, const struct mf_chunk *c, const char *path)
{
	struct rec_hdr h;
	int rc = rec_hdr_decode(rec, REC_HDR_LEN, &h, path);
	if (rc)
		return rc;
	if (!ckpt_digest_eq(&h.digest, &c->digest) || h.raw_len != c->raw_len ||
	    h.stored_len != c->stored_len || h.codec != c->codec || h.pack_id != c->pack_id)
		return ckpt_fail(CKPT_E_CORRUPT, "%s: record at offset %llu is not the chunk the manifest names",
				 path, (unsigned long long)c->offset);
	return 0;
}

/* Checks the restored bytes of chunk c (raw_len at out) against its digest. */
int rd_check_digest(const uint8_t *out, const struct mf_chunk *c, const char *path)
{
	ckpt_digest d;
	ckpt_digest_of(out, c->raw_len, &d);
	if (!ckpt_digest_eq(&d, &c->digest))
		return ckpt_fail(CKPT_E_CHECKSUM, "%s: digest mismatch for the chunk at offset %llu",
				 path, (unsigned long long)c->offset);
	return 0;
}

/* Checks one record (header against the manifest, payload against the digest) and decodes it
 * into out (raw_len bytes). */
int rd_check_record(struct reader1 *r, ckpt_codec_ctx *codec, const uint8_t *rec,
		    const struct mf_chunk *c, uint8_t *out, const char *path)
{
	int rc = rd_check_hdr(rec, c, path);
	if (rc)
		return rc;
	if ((rc = ckpt_codec_decode(codec, c->codec, rec + REC_HDR_LEN, c->stored_len, out,
				    c->raw_len))) {
		ckpt_fail_prefix("%s at offset %llu", path, (unsigned long long)c->offset);
		return rc;
	}
	return rd_check_digest(out, c, path);
}

void rd_pack_name(const struct reader1 *r, const struct pack_fd *p, uint32_t id, char *buf,
		  size_t len)
{
	if (p && p->where)
		snprintf(buf, len, "%s", p->where);
	else
		store_pack_path(r->s, p ? p->dir : 0, id, buf, len);
}

/* The outcome of a read of len bytes of pack p at off that returned n (bytes, or -errno): 0, or
 * -CKPT_E_IO / -CKPT_E_CORRUPT (short: the pack ends before) naming the pack. Counts the bytes. */
int rd_read_result(struct reader1 *r, const struct pack_fd *p, uint64_t off, size_t len,
		   ssize_t n)
{
	char path[4096];
	rd_pack_name(r, p, p->id, path, sizeof path);
	if (n < 0)
		return ckpt_fail(CKPT_E_IO, "read %s at offset %llu: %s", path, (unsigned long long)off,
				 strerror((int)-n));
	if ((size_t)n < len)
		return ckpt_fail(CKPT_E_CORRUPT, "%s: truncated (ends before offset %llu)", path,
				 (unsigned long long)(off + len));
	pthread_mutex_lock(&r->mu);
	r->st.bytes_read += len;
	pthread_mutex_unlock(&r->mu);
	return 0;
}

/* The request reading len bytes of pack p at off: into x->buf, or when iovcnt is not 0, into the
 * segments x->iov[0..iovcnt) (which then total len). */
struct io_req rd_read_req(struct rres *x, const struct pack_fd *p, uint64_t off, size_t len,
			  int iovcnt)
{
	return (struct io_req){.op = iovcnt ? IO_READV : IO_READ, .fd = p->fd,
			       .buf = iovcnt ? NULL : x->buf, .len = len, .off = off, .buf_index = -1,
			       .iov = x->iov, .iovcnt = iovcnt, .iov_work = x->iov_work};
}

/* Reads len bytes of pack p at off into x->buf and waits. */
int rd_read_group(struct reader1 *r, struct rres *x, struct pack_fd *p, uint64_t off,
		  size_t len)
{
	struct io_req q = rd_read_req(x, p, off, len, 0);
	return rd_read_result(r, p, off, len, io_engine_run(r->eng, &q));
}

int rd_tensor_error(struct reader1 *r, const struct mf_tensor *t, uint64_t j)
{
	ckpt_fail_prefix("checkpoint %llu, tensor '%s', chunk %llu (bytes %llu..%llu)",
			 (unsigned long long)r->m.step, t->name, (unsigned long long)j,
			 (unsigned long long)(j * r->m.chunk_size),
			 (unsigned long long)MIN((j + 1) * r->m.chunk_size, t->nbytes));
	return -1;
}

/* End of the read group that starts at reference j: records back to back in one pack, at most a
 * read buffer's worth on disk and, decoded, at most a staging buffer's worth (buf_cap too):
 * compressed records decode to more than they occupy, and a CUDA restore decodes a whole group
 * into the staging buffer. */
uint64_t rd_group_end(const struct reader1 *r, const struct mf_tensor *t, uint64_t j,
		      uint64_t *len)
{
	const struct mf_chunk *c = &r->m.chunks[r->m.refs[t->first_ref + j]];
	uint64_t l = rec_span(c->stored_len), raw = c->raw_len, k = j + 1;
	while (k < t->nrefs) {
		const struct mf_chunk *n = &r->m.chunks[r->m.refs[t->first_ref + k]];
		uint64_t nl = rec_span(n->stored_len);
		if (n->pack_id != c->pack_id || n->offset != c->offset + l || l + nl > r->buf_cap ||
		    raw + n->raw_len > r->buf_cap)
			break;
		l += nl;
		raw += n->raw_len;
		k++;
	}
	*len = l;
	return k;
}

uint64_t rd_group_end_before(const struct reader1 *r, const struct mf_tensor *t, uint64_t j,
			    uint64_t end, uint64_t *len)
{
	uint64_t k = rd_group_end(r, t, j, len);
	if (k <= end)
		return k;
	*len = 0;
	for (uint64_t q = j; q < end; q++)
		*len += rec_span(r->m.chunks[r->m.refs[t->first_ref + q]].stored_len);
	return end;
}

/* The open pack holding the first chunk c (reference j0 of t) of a read group, in *out. Returns 0,
 * or the pack's error (naming the tensor and chunk). */
int rd_group_pack(struct reader1 *r, const struct mf_tensor *t, uint64_t j0,
		  const struct mf_chunk *c, struct pack_fd **out)
{
	pthread_mutex_lock(&r->mu);
	struct pack_fd *p = rd_pack(r, c->pack_id);
	pthread_mutex_unlock(&r->mu);
	if (!p)
		return ckpt_fail(CKPT_E_NOMEM, "out of memory");
	if (p->fd < 0) {
		int rc = ckpt_fail(-p->err, "%s", p->msg ? p->msg : "pack unreadable");
		rd_tensor_error(r, t, j0);
		return rc;
	}
	*out = p;
	return 0;
}
