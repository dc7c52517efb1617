/* The save pipeline's pack writer: a save's pack files, one open per data directory. Opens a pack
 * (its header write probes O_DIRECT), reserves room for a job's records at its end, sends the
 * job's write to the directory's I/O engine and takes its completion, and at the commit makes the
 * packs durable (or removes them when the save failed). Below the stages: it calls only the
 * scheduler (pipe_job_finished, pipe_set_error). */
#include "save/pipe_int.h"

#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/stat.h>
#include <unistd.h>

/* Writes the header of the new pack pk (at path), the probe of O_DIRECT. */
static int write_pack_hdr(struct ckpt_store *s, struct spack *pk, const char *path)
{
	uint8_t *hdr = ckpt_aligned_alloc(PACK_HDR_LEN);
	if (!hdr)
		return ckpt_fail(CKPT_E_NOMEM, "out of memory");
	struct pack_hdr h = {.version = CKPT_FORMAT_VERSION, .pack_id = pk->id,
			     .created = ckpt_wall_ns() / 1000000000, .nonce = ckpt_random64()};
	memcpy(h.uuid, s->hdr.uuid, 16);
	pack_hdr_encode(&h, hdr);
	/* Some file systems accept O_DIRECT at open and refuse it (EINVAL) at the first write: the
	 * header write is the probe. Any other error is the save's. */
	ssize_t n = s->packs.io->pwrite(pk->fd, hdr, PACK_HDR_LEN, 0);
	if (n < 0 && errno == EINVAL && pk->direct) {
		int fl = fcntl(pk->fd, F_GETFL);
		if (fl >= 0 && fcntl(pk->fd, F_SETFL, fl & ~O_DIRECT) == 0) {
			pk->direct = false;
			store_refuse_direct(s);
			n = s->packs.io->pwrite(pk->fd, hdr, PACK_HDR_LEN, 0);
		}
	}
	int rc = 0;
	if (n < 0) {
		int e = errno;
		rc = ckpt_fail(ckpt_errno_code(e) == CKPT_E_NOSPC ? CKPT_E_NOSPC : CKPT_E_IO,
			       "write %s: %s", path, strerror(e));
	} else if (n != PACK_HDR_LEN) {
		rc = io_write_all(s->packs.io, pk->fd, hdr + n, PACK_HDR_LEN - (size_t)n, (uint64_t)n, path);
	}
	free(hdr);
	return rc;
}

/* Whether pack id exists in a pack directory other than dir: on a striped store an id names one
 * pack across all of them (a reader takes the first it finds). */
static bool id_elsewhere(const struct ckpt_store *s, unsigned dir, uint32_t id)
{
	for (unsigned d = 0; d < s->layout.ndirs; d++) {
		char p[4096];
		struct stat st;
		store_pack_path(s, d, id, p, sizeof p);
		if (d != dir && (lstat(p, &st) == 0 || errno != ENOENT))
			return true;
	}
	return false;
}

/* Creates a new pack file in directory dir: its id in *id, its path in path, O_DIRECT in *direct
 * when the file system takes it. Returns the descriptor or -CKPT_E_*.
 * Multi-rank saves of two jobs on one store (different steps) hold the lock shared, and their
 * ranks of the same number allocate in the same id range: a taken id moves on past its run of
 * taken ids (store_skip_taken_ids; begin probed the range, store_max_pack_id, not listed it). On a
 * striped store the file is created first and the other directories looked at after, so that of
 * two creators racing for one id in different directories at most one keeps it. */
static int create_pack(struct ckpt_store *s, unsigned dir, uint32_t *id, char *path, size_t len,
		       bool *direct)
{
	uint32_t limit = s->lock.part_mode ? DIST_PACK_LO(s->lock.part_rank + 1) : DIST_PACK_LO(0);
	int flags = O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC;
	for (int tries = 0; tries < 4096; tries++) {
		if ((*id = store_new_pack_id(s)) >= limit)
			break;
		store_pack_path(s, dir, *id, path, len);
		int fd = open(path, flags | (*direct ? O_DIRECT : 0), 0644);
		if (fd < 0 && *direct && errno == EINVAL) {
			/* tmpfs refuses O_DIRECT with EINVAL after creating the file: the file is ours
			 * (O_EXCL failed no earlier), so take the empty file over. */
			*direct = false;
			store_refuse_direct(s);
			fd = open(path, (flags & ~O_EXCL) | O_TRUNC | O_NOFOLLOW, 0644);
		}
		if (fd < 0 && errno == EEXIST) {
			store_skip_taken_ids(s);
			continue;
		}
		if (fd < 0) {
			int e = errno;
			return ckpt_fail(ckpt_errno_code(e), "create pack %s: %s", path, strerror(e));
		}
		if (s->layout.ndirs < 2 || !id_elsewhere(s, dir, *id))
			return fd;
		close(fd);
		unlink(path);
	}
	return ckpt_fail(CKPT_E_NOSPC, "create a pack in %s: no free pack id left below %u (ids "
			 "taken by other writers, or the range of this writer used up)",
			 s->layout.pack_dirs[dir], limit);
}

/* Opens a new pack in directory dir and writes its header, probing O_DIRECT on the way. */
static int open_pack(struct pipe_save *ps, unsigned dir, int *out)
{
	struct ckpt_store *s = ps->p->s;
	int rc = ckpt_grow((void **)&ps->packs, &ps->cappacks, ps->npacks + 1, sizeof *ps->packs);
	if (rc)
		return rc;
	uint32_t id;
	char path[4096];
	bool direct = store_direct_io(s);
	int fd = create_pack(s, dir, &id, path, sizeof path, &direct);
	if (fd < 0)
		return fd;
	struct spack *pk = &ps->packs[ps->npacks];
	*pk = (struct spack){.id = id, .dir = dir, .fd = fd, .direct = direct, .end = PACK_HDR_LEN};
	ps->npacks++;
	rc = write_pack_hdr(s, pk, path);
	if (rc)
		return rc;
	pthread_mutex_lock(&ps->p->mu);
	ps->st.bytes_written += PACK_HDR_LEN;
	pthread_mutex_unlock(&ps->p->mu);
	*out = (int)(ps->npacks - 1);
	return 0;
}

/* Picks the pack for a job and reserves w bytes at its end, in one critical section (so packs
 * stay near CKPT_OPT_PACK_SIZE however many workers write): round-robin over data directories, a
 * new pack when the directory's current one is full. */
int pipe_pick_pack(struct pipe_save *ps, uint64_t w, int *out, uint32_t *id, uint64_t *base)
{
	struct ckpt_store *s = ps->p->s;
	pthread_mutex_lock(&ps->wmu);
	unsigned dir = ps->next_dir++ % s->layout.ndirs;
	int cur = ps->cur_pack[dir], rc = 0;
	if (cur < 0 || ps->packs[cur].end >= s->opt.pack_size) {
		rc = open_pack(ps, dir, &cur);
		if (!rc)
			ps->cur_pack[dir] = cur;
	}
	if (!rc) {
		*id = ps->packs[cur].id;
		*base = ps->packs[cur].end;
		ps->packs[cur].end += w;
	}
	pthread_mutex_unlock(&ps->wmu);
	*out = cur;
	return rc;
}

static void write_done(struct io_req *r)
{
	struct slabjob *j = r->arg;
	struct pipe_save *ps = j->ps;
	struct pipe *p = ps->p;
	uint64_t written = 0;
	if (r->res < 0 || (size_t)r->res != r->len) {
		char path[4096];
		pthread_mutex_lock(&ps->wmu);
		store_pack_path(p->s, ps->packs[j->pack].dir, ps->packs[j->pack].id, path, sizeof path);
		pthread_mutex_unlock(&ps->wmu);
		int e = r->res < 0 ? (int)-r->res : EIO;
		int code = ckpt_errno_code(e) == CKPT_E_NOSPC ? CKPT_E_NOSPC : CKPT_E_IO;
		pipe_set_error(ps, ckpt_fail(code, "write %s at offset %llu: %s", path,
					     (unsigned long long)r->off,
					     r->res < 0 ? strerror(e) : "short write"));
	} else {
		written = r->len;
	}
	free(j->dig);
	free(j->skip);
	j->dig = NULL;
	j->skip = NULL;
	pipe_job_finished(j, written);
}

void pipe_write_job(struct slabjob *j, uint64_t len, uint64_t base)
{
	struct pipe_save *ps = j->ps;
	pthread_mutex_lock(&ps->wmu);
	int fd = ps->packs[j->pack].fd;
	unsigned dir = ps->packs[j->pack].dir;
	pthread_mutex_unlock(&ps->wmu);
	j->io = (struct io_req){.op = IO_WRITE, .fd = fd, .buf = ps->p->pool.slabs[j->slab],
				.len = (size_t)len, .off = base, .buf_index = (int)j->slab,
				.done = write_done, .arg = j};
	io_engine_submit(ps->p->eng[dir], &j->io);
}

int pipe_close_packs(struct pipe_save *ps, bool sync)
{
	struct ckpt_store *s = ps->p->s;
	int rc = 0;
	bool dirs[MAX_DATA_DIRS + 1] = {false};
	for (size_t i = 0; i < ps->npacks; i++) {
		struct spack *pk = &ps->packs[i];
		char path[4096];
		store_pack_path(s, pk->dir, pk->id, path, sizeof path);
		if (sync && !rc && s->packs.io->fdatasync(pk->fd)) {
			int e = errno;
			rc = ckpt_fail(ckpt_errno_code(e) == CKPT_E_NOSPC ? CKPT_E_NOSPC : CKPT_E_IO,
				       "fdatasync %s: %s", path, strerror(e));
		}
		if (close(pk->fd) && sync && !rc) {
			int e = errno;
			rc = ckpt_fail(CKPT_E_IO, "close %s: %s", path, strerror(e));
		}
		pk->fd = -1;
		dirs[pk->dir] = true;
		if (!sync && !ps->keep_packs)
			unlink(path);
	}
	/* The packs' directory entries must be durable before a manifest names them. */
	for (unsigned d = 0; sync && !rc && d < s->layout.ndirs; d++)
		if (dirs[d])
			rc = io_fsync_dir(s->layout.pack_dirs[d]);
	return rc;
}
