/* Verify: every chunk record read and checked (header, digest, zero padding), once per record
 * with a verify cache (vcache.c), and each pack walked to its end so that bytes appended to it
 * show. Damage is reported through the caller's callback, never restored. Uses pack.c. */
#include <errno.h>
#include <stdlib.h>
#include <sys/stat.h>

#include "common/common.h"
#include "read/read_int.h"
#include "store/store.h"
#include "read/vcache.h"

/* The bytes between a record's end and its 4 KiB boundary are written as zeros: anything else
 * there is damage the digest cannot see. */
int rd_check_padding(const uint8_t *rec, const struct mf_chunk *c, const char *path)
{
	uint64_t end = rec_span(c->stored_len), nz = 0;
	for (uint64_t k = REC_HDR_LEN + (uint64_t)c->stored_len; k < end; k++)
		nz += rec[k] != 0;
	if (nz)
		return ckpt_fail(CKPT_E_CORRUPT, "%s: record at offset %llu has %llu nonzero padding "
				 "byte(s) after its data", path, (unsigned long long)c->offset,
				 (unsigned long long)nz);
	return 0;
}

/* Walks the records of pack p from its header to its end: a pack is written once, record after
 * record, so bytes appended to it (or a torn tail) show as a walk that does not end exactly at
 * the file's size. Returns 0 or -CKPT_E_CORRUPT/-CKPT_E_IO with the message naming the pack. */
static int check_pack_tail(struct reader1 *r, struct rres *x, struct pack_fd *p)
{
	char path[4096];
	rd_pack_name(r, p, p->id, path, sizeof path);
	struct stat st;
	if (fstat(p->fd, &st))
		return ckpt_fail(CKPT_E_IO, "stat %s: %s", path, strerror(errno));
	uint64_t size = (uint64_t)st.st_size, off = PACK_HDR_LEN;
	while (off < size) {
		struct rec_hdr h;
		int rc = size - off >= 4096 ? rd_read_group(r, x, p, off, 4096) : 0;
		if (size - off < 4096 || rc || rec_hdr_decode(x->buf, REC_HDR_LEN, &h, path))
			return ckpt_fail(CKPT_E_CORRUPT, "%s: %llu byte(s) at offset %llu are not records "
					 "(appended, or a damaged record header)", path,
					 (unsigned long long)(size - off), (unsigned long long)off);
		off += rec_span(h.stored_len);
	}
	if (off > size)
		return ckpt_fail(CKPT_E_CORRUPT, "%s: the last record ends at %llu, after the end of "
				 "the file (%llu bytes)", path, (unsigned long long)off,
				 (unsigned long long)size);
	return 0;
}

/* Reports a problem of a whole pack (not of one chunk) through on_damage; a pack with a damaged
 * chunk (state: per chunk, 1 intact) was reported already. */
static long report_pack_tails(struct reader1 *r, struct rres *x, const int *state,
			      ckpt_damage_fn on_damage, void *arg)
{
	long bad = 0;
	for (size_t i = 0; i < r->nfds; i++) {
		struct pack_fd *p = r->fds[i];
		bool chunk_damage = false;
		for (uint32_t c = 0; c < r->m.n_chunks && !chunk_damage; c++)
			chunk_damage = r->m.chunks[c].pack_id == p->id && state[c] != 1;
		/* A pack fetched from the remote holds only this checkpoint's records: no tail. */
		if (p->fd < 0 || p->remote || chunk_damage || !check_pack_tail(r, x, p))
			continue;
		bad++;
		if (on_damage) {
			char path[4096];
			rd_pack_name(r, p, p->id, path, sizeof path);
			ckpt_damage d = {.step = r->m.step, .file = path, .error = CKPT_E_CORRUPT,
					 .message = ckpt_errmsg()};
			on_damage(&d, arg);
		}
	}
	return bad;
}

long reader1_verify(reader1 *r, ckpt_damage_fn on_damage,
				 vprogress_fn on_progress, void *arg)
{
	return reader1_verify_cached(r, NULL, on_damage, on_progress, arg);
}

/* The state of chunk c (1 intact, else a negative CKPT_E_* code; *msg its message): from the
 * cache when it knows the record, else read and checked (and put in the cache). */
static int verify_chunk(struct reader1 *r, ckpt_verify_cache *cache, struct rres *x,
			const struct mf_chunk *c, const char *path, char **own, const char **msg)
{
	struct pack_fd *p = rd_pack(r, c->pack_id);
	int rc = cache ? vcache_get(cache, c->pack_id, c->offset, &c->digest, msg) : 0;
	if (rc)
		return rc;
	if (!p)
		rc = ckpt_fail(CKPT_E_NOMEM, "out of memory");
	else if (p->fd < 0)
		rc = ckpt_fail(-p->err, "%s", p->msg ? p->msg : "pack unreadable");
	else if (!(rc = rd_read_group(r, x, p, c->offset, (size_t)rec_span(c->stored_len))) &&
		 !(rc = rd_check_record(r, r->codec, r->buf, c, r->scratch, path)))
		rc = rd_check_padding(r->buf, c, path);
	int state = rc ? rc : 1;
	*own = rc ? strdup(ckpt_errmsg()) : NULL;
	*msg = *own;
	if (cache && vcache_put(cache, c->pack_id, c->offset, &c->digest, state, *own,
				p && p->fd >= 0 ? rec_span(c->stored_len) : 0))
		return -CKPT_E_NOMEM;
	return state;
}

long reader1_verify_cached(reader1 *r, ckpt_verify_cache *cache,
					ckpt_damage_fn on_damage, vprogress_fn on_progress,
					void *arg)
{
	if (!r)
		return ckpt_fail(CKPT_E_INVAL, "verify: NULL reader");
	/* Per distinct chunk: 0 unchecked, 1 intact, else the negative error; messages kept for
	 * chunks shared by several tensors. */
	int *state = calloc(r->m.n_chunks ? r->m.n_chunks : 1, sizeof *state);
	char **msgs = calloc(r->m.n_chunks ? r->m.n_chunks : 1, sizeof *msgs);
	if (!state || !msgs) {
		free(state);
		free(msgs);
		return ckpt_fail(CKPT_E_NOMEM, "out of memory");
	}
	uint64_t total = 0, done = 0;
	struct rres x = {.buf = r->buf};
	for (uint32_t i = 0; i < r->m.n_tensors; i++)
		total += r->m.tensors[i].nbytes;
	long damaged = 0;
	for (uint32_t i = 0; i < r->m.n_tensors; i++) {
		const struct mf_tensor *t = &r->m.tensors[i];
		for (uint64_t j = 0; j < t->nrefs; j++) {
			uint32_t ci = r->m.refs[t->first_ref + j];
			const struct mf_chunk *c = &r->m.chunks[ci];
			char path[4096];
			struct pack_fd *p = rd_pack(r, c->pack_id);
			rd_pack_name(r, p, c->pack_id, path, sizeof path);
			if (!state[ci]) {
				const char *m = NULL;
				state[ci] = verify_chunk(r, cache, &x, c, path, &msgs[ci], &m);
				if (state[ci] == -CKPT_E_NOMEM && !m)
					m = "out of memory";
				if (m && !msgs[ci])
					msgs[ci] = strdup(m);
			}
			if (state[ci] != 1) {
				damaged++;
				if (on_damage) {
					ckpt_damage d = {.step = r->m.step, .tensor = t->name, .chunk = j,
							 .offset = j * r->m.chunk_size, .file = path,
							 .error = -state[ci],
							 .message = msgs[ci] ? msgs[ci] : ckpt_strerror(state[ci])};
					on_damage(&d, arg);
				}
			}
			done += c->raw_len;
			if (on_progress)
				on_progress(done, total, arg);
		}
	}
	damaged += report_pack_tails(r, &x, state, on_damage, arg);
	for (uint32_t i = 0; i < r->m.n_chunks; i++)
		free(msgs[i]);
	free(msgs);
	free(state);
	return damaged;
}
