/* Reading a checkpoint from the remote without pulling it (tier.h): the manifest of a step that is
 * not local, and, for each pack that is not local, an anonymous file holding the pack's header
 * and only the records the checkpoint references, fetched by range reads (adjacent records
 * merged, several in parallel), each record checked against its digest before it is written.
 * The reader then reads that file as a local pack (and checks each record again). The file is
 * unlinked from the start: nothing of it outlives the reader, and gc, saves and pushes never see
 * it. */
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "common/common.h"
#include "format/codec.h"
#include "format/format.h"
#include "io/io.h"
#include "read/reader.h"
#include "tier/tier.h"

#define RUN_MAX (16u << 20) /* bytes of one range read */

/* One range read: records [first, last] of the sorted list, back to back in the pack. */
struct run {
	size_t first, last;
	uint64_t off, len;
};

struct fetch_job {
	const struct tier_ref *t;
	const char *key;
	const struct mf_chunk **c; /* this pack's records, by offset */
	struct run *runs;
	uint32_t chunk_size;
	int fd;
	uint64_t *bytes; /* atomic: bytes read from the remote */
};

/* An anonymous file for the fetched records: in the store directory (room like the packs'),
 * else in $TMPDIR. Returns the fd or -CKPT_E_*. */
static int anon_file(const char *dir)
{
	const char *tmp = getenv("TMPDIR");
	const char *dirs[] = {dir, tmp && *tmp ? tmp : "/tmp"};
	int e = 0;
	for (size_t i = 0; i < ARRAY_SIZE(dirs); i++) {
		int fd = open(dirs[i], O_TMPFILE | O_RDWR | O_CLOEXEC, 0600);
		if (fd >= 0)
			return fd;
		e = errno;
	}
	return ckpt_fail(ckpt_errno_code(e), "a temporary file for remote records in %s: %s", dir,
			 strerror(e));
}

static int cmp_off(const void *a, const void *b)
{
	uint64_t x = (*(const struct mf_chunk *const *)a)->offset;
	uint64_t y = (*(const struct mf_chunk *const *)b)->offset;
	return x < y ? -1 : x > y;
}

int tier_check_record(ckpt_codec_ctx *codec, uint8_t *out, const uint8_t *rec,
		      const struct mf_chunk *c, const char *what)
{
	int rc = rd_check_hdr(rec, c, what);
	if (!rc && c->codec == CKPT_CODEC_RAW && c->stored_len == c->raw_len)
		return rd_check_digest(rec + REC_HDR_LEN, c, what); /* in place: no copy to decode */
	if (!rc)
		rc = ckpt_codec_decode(codec, c->codec, rec + REC_HDR_LEN, c->stored_len, out, c->raw_len);
	return rc ? rc : rd_check_digest(out, c, what);
}

/* Fetches run i, checks each of its records, writes them at their offsets. */
static int fetch_run(void *ctx, size_t i)
{
	struct fetch_job *j = ctx;
	const struct run *u = &j->runs[i];
	uint8_t *buf = malloc(u->len);
	uint8_t *out = malloc(j->chunk_size);
	ckpt_codec_ctx *codec = ckpt_codec_ctx_create(j->chunk_size);
	int rc = buf && out && codec ? 0 : ckpt_fail(CKPT_E_NOMEM, "out of memory (%s)", j->key);
	if (!rc && !(rc = j->t->r->ops->get(j->t->r, j->key, u->off, u->len, buf)))
		__atomic_add_fetch(j->bytes, u->len, __ATOMIC_RELAXED);
	for (size_t k = u->first; !rc && k <= u->last; k++)
		rc = tier_check_record(codec, out, buf + (j->c[k]->offset - u->off), j->c[k], j->key);
	if (rc)
		ckpt_fail_prefix("damaged remote object");
	else
		rc = io_write_all(&ckpt_io_psync, j->fd, buf, u->len, u->off, j->key);
	ckpt_codec_ctx_free(codec);
	free(buf);
	free(out);
	return rc;
}

/* The runs of the sorted records c[0..n): records back to back (each a record span apart) join
 * a run up to RUN_MAX bytes. Returns the count; *runs is malloc'd (NULL: out of memory). */
static size_t plan_runs(const struct mf_chunk **c, size_t n, struct run **runs)
{
	*runs = malloc((n ? n : 1) * sizeof **runs);
	size_t nr = 0;
	for (size_t k = 0; *runs && k < n; k++) {
		uint64_t span = rec_span(c[k]->stored_len);
		struct run *u = nr ? &(*runs)[nr - 1] : NULL;
		if (u && u->off + u->len == c[k]->offset && u->len + span <= RUN_MAX) {
			u->last = k;
			u->len += span;
		} else if (!u || c[k]->offset >= u->off + u->len) { /* a duplicate offset: skipped */
			(*runs)[nr++] = (struct run){k, k, c[k]->offset, span};
		}
	}
	return nr;
}

int tier_fetch_pack(struct ckpt_store *s, const struct tier_ref *t, const struct manifest *m,
		    uint32_t id, char *what, size_t len, uint64_t *bytes)
{
	char key[256];
	tier_key_pack(t, id, key, sizeof key);
	snprintf(what, len, "%s/%s", t->r->url, key);
	const struct mf_chunk **c = malloc((m->n_chunks ? m->n_chunks : 1) * sizeof *c);
	if (!c)
		return ckpt_fail(CKPT_E_NOMEM, "out of memory (%s)", key);
	size_t n = 0;
	for (uint32_t i = 0; i < m->n_chunks; i++)
		if (m->chunks[i].pack_id == id)
			c[n++] = &m->chunks[i];
	qsort(c, n, sizeof *c, cmp_off);
	uint8_t hdr[PACK_HDR_LEN];
	int rc = t->r->ops->get(t->r, key, 0, sizeof hdr, hdr);
	if (rc == -CKPT_E_NOTFOUND)
		ckpt_fail_prefix("checkpoint %" PRIu64 " names pack %u, which the remote lacks", m->step, id);
	int fd = rc ? -1 : anon_file(s->path);
	if (fd < 0 && !rc)
		rc = fd;
	if (!rc)
		rc = io_write_all(&ckpt_io_psync, fd, hdr, sizeof hdr, 0, key);
	struct run *runs = NULL;
	size_t nr = rc ? 0 : plan_runs(c, n, &runs);
	if (!rc && !runs)
		rc = ckpt_fail(CKPT_E_NOMEM, "out of memory (%s)", key);
	struct fetch_job j = {.t = t, .key = key, .c = c, .runs = runs, .chunk_size = m->chunk_size,
			      .fd = fd, .bytes = bytes};
	struct tier_par par = {.one = fetch_run, .ctx = &j, .n = nr};
	if (!rc)
		rc = tier_parallel(&par, t->r->cfg.parallel);
	free(runs);
	free(c);
	if (rc) {
		if (fd >= 0)
			close(fd);
		return rc;
	}
	return fd;
}
