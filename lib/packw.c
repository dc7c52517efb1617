/* Pack files are written by exactly one save each and never appended to later, so a crash leaves
 * at worst whole unreferenced packs: garbage for gc, never a damaged live record. */
#include "packw.h"

#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <unistd.h>

#include "common.h"

int packw_init(struct packw *w, struct ckpt_store *s, uint32_t next_id, size_t max_record)
{
	memset(w, 0, sizeof *w);
	w->s = s;
	w->fd = -1;
	w->next_id = next_id;
	w->direct_ok = s->opt.direct_io != 0;
	w->cap = ALIGN_UP(MAX((size_t)s->opt.io_size, max_record + PACK_HDR_LEN), CKPT_ALIGN);
	w->buf = ckpt_aligned_alloc(w->cap);
	w->created = calloc(16, sizeof *w->created);
	if (!w->buf || !w->created)
		return ckpt_fail(CKPT_E_NOMEM, "pack writer: out of memory (%zu bytes)", w->cap);
	return 0;
}

static int open_pack(struct packw *w)
{
	struct ckpt_store *s = w->s;
	w->id = w->next_id++;
	store_pack_path(s, w->id, w->path, sizeof w->path);
	int flags = O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC;
	w->direct = w->direct_ok;
	int fd = open(w->path, flags | (w->direct ? O_DIRECT : 0), 0644);
	if (fd < 0 && w->direct && errno == EINVAL) {
		/* tmpfs and some network file systems refuse O_DIRECT: buffered + fdatasync. */
		w->direct = w->direct_ok = false;
		fd = open(w->path, flags, 0644);
	}
	if (fd < 0) {
		int e = errno;
		return ckpt_fail(ckpt_errno_code(e), "create pack %s: %s", w->path, strerror(e));
	}
	w->fd = fd;
	if ((w->ncreated & 15) == 15) {
		uint32_t *n = realloc(w->created, (w->ncreated + 17) * sizeof *n);
		if (!n)
			return ckpt_fail(CKPT_E_NOMEM, "out of memory");
		w->created = n;
	}
	w->created[w->ncreated++] = w->id;
	struct pack_hdr h = {.version = CKPT_FORMAT_VERSION, .pack_id = w->id,
			     .created = ckpt_wall_ns() / 1000000000};
	memcpy(h.uuid, s->hdr.uuid, 16);
	pack_hdr_encode(&h, w->buf);
	w->len = PACK_HDR_LEN;
	w->off = 0;
	return 0;
}

static int flush(struct packw *w)
{
	if (!w->len)
		return 0;
	const struct ckpt_io_ops *io = w->s->io;
	int rc = io_write_all(io, w->fd, w->buf, w->len, w->off, w->path);
	if (rc == -CKPT_E_IO && w->direct && errno == EINVAL) {
		/* Some file systems accept O_DIRECT at open and refuse it at write time. */
		int fl = fcntl(w->fd, F_GETFL);
		if (fl >= 0 && fcntl(w->fd, F_SETFL, fl & ~O_DIRECT) == 0) {
			w->direct = w->direct_ok = false;
			rc = io_write_all(io, w->fd, w->buf, w->len, w->off, w->path);
		}
	}
	if (rc)
		return rc;
	w->off += w->len;
	w->bytes_written += w->len;
	w->len = 0;
	return 0;
}

static int close_pack(struct packw *w)
{
	int rc = flush(w);
	if (!rc && w->s->io->fdatasync(w->fd)) {
		int e = errno;
		rc = ckpt_fail(ckpt_errno_code(e) == CKPT_E_NOSPC ? CKPT_E_NOSPC : CKPT_E_IO,
			       "fdatasync %s: %s", w->path, strerror(e));
	}
	if (close(w->fd) && !rc) {
		int e = errno;
		rc = ckpt_fail(CKPT_E_IO, "close %s: %s", w->path, strerror(e));
	}
	w->fd = -1;
	return rc;
}

uint8_t *packw_reserve(struct packw *w, size_t span, int *rc)
{
	*rc = 0;
	if (w->fd < 0 && (*rc = open_pack(w)))
		return NULL;
	if (w->len + span > w->cap && (*rc = flush(w)))
		return NULL;
	return w->buf + w->len;
}

int packw_commit(struct packw *w, size_t span, uint32_t *pack_id, uint64_t *offset)
{
	*pack_id = w->id;
	*offset = w->off + w->len;
	w->len += span;
	if (w->off + w->len >= w->s->opt.pack_size)
		return close_pack(w);
	return 0;
}

int packw_finish(struct packw *w)
{
	int rc = 0;
	if (w->fd >= 0)
		rc = close_pack(w);
	/* The packs' directory entries must be durable before a manifest names them. */
	if (!rc && w->ncreated)
		rc = io_fsync_dir(w->s->pack_dir);
	return rc;
}

void packw_free(struct packw *w, bool remove)
{
	if (w->fd >= 0)
		close(w->fd);
	w->fd = -1;
	if (remove) {
		for (size_t i = 0; i < w->ncreated; i++) {
			char p[4096];
			store_pack_path(w->s, w->created[i], p, sizeof p);
			unlink(p);
		}
	}
	free(w->buf);
	free(w->created);
	w->buf = NULL;
	w->created = NULL;
}
