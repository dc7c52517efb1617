/* Reading a checkpoint: restore and verify. Every chunk is re-hashed after decoding, so damage
 * anywhere (record header, payload, a record moved or swapped) is caught, never restored. */
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <limits.h>
#include <sys/stat.h>
#include <sys/uio.h>
#include <unistd.h>

#include <pthread.h>

#include "format/codec.h"
#include "common/common.h"
#include "io/engine.h"
#include "gpu/gpu.h"
#include "store/lease.h"
#include "read/reader.h"
#include "store/store.h"
#include "read/vcache.h"
#include "common/workers.h"

struct pack_fd {
	uint32_t id;
	unsigned dir;
	int fd;     /* -1 after a failed open */
	int err;    /* its error, reported again for every chunk of the pack */
	char *msg;
	/* Direct reads into the destination (direct_plan): file offsets and lengths in multiples of
	 * blk, memory addresses in multiples of mem_align (1 and 1 without O_DIRECT). */
	unsigned blk, mem_align;
	/* Set once the kernel refused a vectored O_DIRECT read of this pack with EINVAL although
	 * statx's alignment allowed it (a file system or stacked device that checks more than it
	 * reports): its later groups take the buffer path. Atomic: the pack cache is shared by the
	 * restore threads. */
	int no_direct;
};

struct rres;

struct ckpt_reader {
	struct ckpt_store *s;
	struct manifest m;
	char mf_path[4096];
	struct pack_fd **fds;
	size_t nfds;
	ckpt_codec_ctx *codec;
	uint8_t *buf, *scratch;
	size_t buf_cap;
	ckpt_stats st;
	pthread_mutex_t mu; /* pack cache and statistics during restore_all */
	struct io_engine *eng; /* reads go through the same kind of engine as the writes */
	uint32_t *names;    /* open addressing: tensor index + 1 by name hash */
	size_t names_cap;
	struct lease *lease; /* tells gc and prune which packs this reader needs (lease.c) */
	/* CUDA restores: copies are ordered after the work queued on user_stream (NULL: the legacy
	 * default stream) when each restore call starts; gen numbers the calls. */
	void *user_stream;
	uint32_t gen;
	struct rres *res;   /* ckpt_reader_restore's staging and streams, kept until close */
	uint64_t direct_chunks, buffered_chunks; /* raw chunks read into place, chunks decoded (mu) */
	struct rpipe *pipe; /* ckpt_reader_restore's reads in flight (host destinations) */
	/* Group reads submitted and not yet checked, now and at most (atomics): what the pipes keep
	 * in flight at the device (reader_inflight_max). */
	uint64_t inflight, inflight_max, inflight_bytes, inflight_bytes_max;
};

static void reader_res_free(struct ckpt_reader *r);
struct rpipe;
static void rpipe_free(struct rpipe *pp);

static size_t name_hash(const char *n, size_t len)
{
	return (size_t)ckpt_checksum64(n, len);
}

/* Builds the name index so that lookups by name cost O(1) (models have 100k+ tensors). */
static int index_names(struct ckpt_reader *r)
{
	size_t cap = 16;
	while (cap < 2 * (size_t)r->m.n_tensors)
		cap *= 2;
	r->names = calloc(cap, sizeof *r->names);
	if (!r->names)
		return ckpt_fail(CKPT_E_NOMEM, "out of memory");
	r->names_cap = cap;
	for (uint32_t i = 0; i < r->m.n_tensors; i++) {
		const struct mf_tensor *t = &r->m.tensors[i];
		size_t k = name_hash(t->name, t->name_len) & (cap - 1);
		while (r->names[k])
			k = (k + 1) & (cap - 1);
		r->names[k] = i + 1;
	}
	return 0;
}

/* Read bytes a restore keeps in flight at least (restore_all over all its threads, or one
 * ckpt_reader_restore): a disk's best sequential read wants deep queues of large blocks (the fio
 * sweep's best points here were 16 MiB x 32 x 2 jobs and 1 MiB x 32; 224 MiB in flight, queue
 * depth 32, measured no faster than 128 MiB on this disk). Each group read has its own buf_cap
 * read buffer; on the direct path it holds only the scratch pieces, so its untouched pages cost
 * no memory. */
#define RESTORE_INFLIGHT_BYTES (128u << 20)

/* Group reads in flight in a restore, and in the reader's engine: at least the queue depth; at
 * most 256 (the largest queue depth), which small read buffers would exceed. */
static unsigned restore_slots(const struct ckpt_reader *r)
{
	unsigned n = MAX(r->s->opt.queue_depth, (unsigned)(RESTORE_INFLIGHT_BYTES / r->buf_cap));
	return MIN(MAX(n, 2u), 256u);
}

/* Threads of restore_all: one per core (or CKPT_OPT_THREADS), each keeping at least two of the
 * restore_slots reads in flight so that its next read is at the device while it hashes. Reads
 * wait on the device, not the CPU: the slots, not the threads, keep the queue full. */
static unsigned restore_threads(const struct ckpt_reader *r)
{
	unsigned n = r->s->opt.threads ? r->s->opt.threads : (unsigned)sysconf(_SC_NPROCESSORS_ONLN);
	return MAX(MIN(n, restore_slots(r) / 2), 1u);
}

CKPT_API int ckpt_reader_open(ckpt_store *s, uint64_t step, ckpt_reader **out)
{
	*out = NULL;
	if (!s)
		return ckpt_fail(CKPT_E_INVAL, "reader: NULL store");
	/* The lease comes first: gc and prune defer pack removals from before the manifest is read
	 * until the reader is closed. */
	struct lease *lease;
	int rc = lease_take(s, &lease);
	if (!rc)
		rc = ckpt_store_resolve(s, step, &step);
	if (rc) {
		lease_drop(lease);
		return rc;
	}
	struct ckpt_reader *r = calloc(1, sizeof *r);
	if (!r) {
		lease_drop(lease);
		return ckpt_fail(CKPT_E_NOMEM, "out of memory");
	}
	r->s = s;
	r->lease = lease;
	pthread_mutex_init(&r->mu, NULL);
	char name[64];
	store_mf_name(step, name, sizeof name);
	snprintf(r->mf_path, sizeof r->mf_path, "%s/%s", s->mf_dir, name);
	if ((rc = store_load_manifest(s, step, &r->m))) {
		pthread_mutex_destroy(&r->mu);
		lease_drop(r->lease);
		free(r);
		return rc;
	}
	if ((rc = lease_publish(r->lease, &r->m))) {
		ckpt_reader_close(r);
		return rc;
	}
	if ((rc = index_names(r))) {
		ckpt_reader_close(r);
		return rc;
	}
	uint32_t cs = r->m.chunk_size;
	r->buf_cap = ALIGN_UP(MAX((size_t)s->opt.io_size, rec_span((uint32_t)ckpt_codec_bound(cs))),
			      CKPT_ALIGN);
	r->buf = ckpt_aligned_alloc(r->buf_cap);
	r->scratch = malloc(cs);
	r->codec = ckpt_codec_ctx_create(cs);
	if (!r->buf || !r->scratch || !r->codec) {
		ckpt_reader_close(r);
		return ckpt_fail(CKPT_E_NOMEM, "out of memory");
	}
	/* Room in the engine for every read a restore keeps in flight. */
	if ((rc = io_engine_create(s->opt.engine, restore_slots(r), NULL, 0, 0, &r->eng))) {
		ckpt_reader_close(r);
		return rc;
	}
	r->st.step = step;
	snprintf(r->st.engine, sizeof r->st.engine, "%s", io_engine_name(r->eng));
	r->st.direct_io = s->opt.direct_io;
	*out = r;
	return 0;
}

CKPT_API void ckpt_reader_close(ckpt_reader *r)
{
	if (!r)
		return;
	for (size_t i = 0; i < r->nfds; i++) {
		if (r->fds[i]->fd >= 0)
			close(r->fds[i]->fd);
		free(r->fds[i]->msg);
		free(r->fds[i]);
	}
	free(r->fds);
	manifest_free(&r->m);
	rpipe_free(r->pipe);
	reader_res_free(r);
	free(r->buf);
	free(r->scratch);
	ckpt_codec_ctx_free(r->codec);
	io_engine_destroy(r->eng);
	pthread_mutex_destroy(&r->mu);
	free(r->names);
	lease_drop(r->lease); /* after the packs are closed */
	free(r);
}

CKPT_API void ckpt_reader_info(const ckpt_reader *r, ckpt_info *info)
{
	store_info_of(&r->m, info);
}

CKPT_API size_t ckpt_reader_tensor_count(const ckpt_reader *r)
{
	return r ? r->m.n_tensors : 0;
}

CKPT_API int ckpt_reader_tensor(const ckpt_reader *r, size_t i, ckpt_tensor_info *info)
{
	if (!r || i >= r->m.n_tensors)
		return ckpt_fail(CKPT_E_INVAL, "tensor index %zu out of range", i);
	const struct mf_tensor *t = &r->m.tensors[i];
	memset(info, 0, sizeof *info);
	info->name = t->name;
	info->dtype = (ckpt_dtype)t->dtype;
	info->ndim = t->ndim;
	info->shape = t->shape;
	info->nbytes = t->nbytes;
	info->chunks = t->nrefs;
	for (uint64_t j = 0; j < t->nrefs; j++) {
		const struct mf_chunk *c = &r->m.chunks[r->m.refs[t->first_ref + j]];
		if (c->flags & MF_CHUNK_NEW) {
			info->chunks_new++;
			info->bytes_new += rec_span(c->stored_len);
		}
	}
	return 0;
}

CKPT_API long ckpt_reader_find(const ckpt_reader *r, const char *name)
{
	if (r && name && r->names_cap) {
		size_t len = strlen(name);
		for (size_t k = name_hash(name, len) & (r->names_cap - 1); r->names[k];
		     k = (k + 1) & (r->names_cap - 1)) {
			/* Probing meets entries in insertion order: with duplicate names (a foreign
			 * manifest), the first one wins, as it did when added. */
			uint32_t i = r->names[k] - 1;
			if (r->m.tensors[i].name_len == len && !memcmp(r->m.tensors[i].name, name, len))
				return (long)i;
		}
	}
	return ckpt_fail(CKPT_E_NOTFOUND, "no tensor '%s' in checkpoint %llu", name ? name : "",
			 r ? (unsigned long long)r->m.step : 0ull);
}

CKPT_API size_t ckpt_reader_meta_count(const ckpt_reader *r)
{
	return r ? r->m.n_meta : 0;
}

CKPT_API int ckpt_reader_meta(const ckpt_reader *r, size_t i, const char **key, const char **value)
{
	if (!r || i >= r->m.n_meta)
		return ckpt_fail(CKPT_E_INVAL, "metadata index %zu out of range", i);
	*key = r->m.meta[i].key;
	*value = r->m.meta[i].value;
	return 0;
}

CKPT_API const char *ckpt_reader_get_meta(const ckpt_reader *r, const char *key)
{
	for (uint32_t i = 0; r && key && i < r->m.n_meta; i++)
		if (!strcmp(r->m.meta[i].key, key))
			return r->m.meta[i].value;
	return NULL;
}

CKPT_API void ckpt_reader_stats(const ckpt_reader *r, ckpt_stats *st)
{
	*st = r->st;
}

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
static struct pack_fd *get_pack(struct ckpt_reader *r, uint32_t id)
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
	for (unsigned d = 0; d < r->s->ndirs && fd < 0; d++) {
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
	if (fd < 0 && errno == ENOENT && r->s->ndirs > 1) {
		/* Striped store: say where it was looked for. */
		char where[2048] = "";
		for (unsigned d = 0; d < r->s->ndirs; d++) {
			size_t used = strlen(where);
			snprintf(where + used, sizeof where - used, "%s%s", d ? ", " : "",
				 r->s->pack_dirs[d]);
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

/* Checks a record's header (REC_HDR_LEN bytes at rec) against the manifest's chunk c. */
static int check_hdr(const uint8_t *rec, const struct mf_chunk *c, const char *path)
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
static int check_digest(const uint8_t *out, const struct mf_chunk *c, const char *path)
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
static int check_record(struct ckpt_reader *r, ckpt_codec_ctx *codec, const uint8_t *rec,
			const struct mf_chunk *c, uint8_t *out, const char *path)
{
	int rc = check_hdr(rec, c, path);
	if (rc)
		return rc;
	if ((rc = ckpt_codec_decode(codec, c->codec, rec + REC_HDR_LEN, c->stored_len, out,
				    c->raw_len))) {
		ckpt_fail_prefix("%s at offset %llu", path, (unsigned long long)c->offset);
		return rc;
	}
	return check_digest(out, c, path);
}

/* What one thread needs to restore: a read buffer, a codec context, and for CUDA destinations a
 * pinned staging buffer and a stream. The reader owns one set for ckpt_reader_restore(); each
 * restore_all worker thread has its own. */
struct rres {
	uint8_t *buf;           /* buf_cap bytes, 4 KiB aligned */
	ckpt_codec_ctx *codec;
	uint8_t *staging;       /* pinned, buf_cap bytes, for CUDA destinations */
	struct iovec *iov, *iov_work; /* IOV_MAX each, for direct reads (allocated on first use) */
	void *stream[16];
	uint32_t ordered[16];   /* reader gen for which stream[d] waits on the caller's stream */
};

static void rres_free(struct rres *x)
{
	bool cuda = x->staging != NULL;
	for (int d = 0; d < 16; d++)
		cuda |= x->stream[d] != NULL;
	/* Only touch the CUDA provider when it was used (loading it sets messages). */
	const struct ckpt_gpu_ops *g = cuda ? ckpt_gpu_cuda() : NULL;
	free(x->buf);
	free(x->iov);
	free(x->iov_work);
	ckpt_codec_ctx_free(x->codec);
	if (x->staging && g)
		g->free_pinned(x->staging, 0);
	for (int d = 0; d < 16; d++)
		if (x->stream[d] && g)
			g->stream_destroy(x->stream[d]);
	memset(x, 0, sizeof *x);
}

static void reader_res_free(struct ckpt_reader *r)
{
	if (!r->res)
		return;
	r->res->buf = NULL; /* the reader's own, freed by ckpt_reader_close() */
	r->res->codec = NULL;
	rres_free(r->res);
	free(r->res);
	r->res = NULL;
}

/* The outcome of a read of len bytes of pack p at off that returned n (bytes, or -errno): 0, or
 * -CKPT_E_IO / -CKPT_E_CORRUPT (short: the pack ends before) naming the pack. Counts the bytes. */
static int read_result(struct ckpt_reader *r, const struct pack_fd *p, uint64_t off, size_t len,
		       ssize_t n)
{
	char path[4096];
	store_pack_path(r->s, p->dir, p->id, path, sizeof path);
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
static struct io_req read_req(struct rres *x, const struct pack_fd *p, uint64_t off, size_t len,
			      int iovcnt)
{
	return (struct io_req){.op = iovcnt ? IO_READV : IO_READ, .fd = p->fd,
			       .buf = iovcnt ? NULL : x->buf, .len = len, .off = off, .buf_index = -1,
			       .iov = x->iov, .iovcnt = iovcnt, .iov_work = x->iov_work};
}

/* Reads len bytes of pack p at off into x->buf and waits. */
static int read_group(struct ckpt_reader *r, struct rres *x, struct pack_fd *p, uint64_t off,
		      size_t len)
{
	struct io_req q = read_req(x, p, off, len, 0);
	return read_result(r, p, off, len, io_engine_run(r->eng, &q));
}

static int tensor_error(struct ckpt_reader *r, const struct mf_tensor *t, uint64_t j)
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
 * into the staging buffer (issue 12, defect 1). */
static uint64_t group_end(const struct ckpt_reader *r, const struct mf_tensor *t, uint64_t j,
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

/* CUDA destinations: the stream of device mem, created before the staging buffer so that the
 * pinned allocation runs on that device's context, never on device 0 of a process that does not
 * use it (defect 4); and ordered once per restore call after the caller's stream (defect 6). */
static int restore_prepare(struct ckpt_reader *r, struct rres *x, const struct ckpt_gpu_ops *g,
			   int mem)
{
	if (!g)
		return 0;
	int rc;
	if (!x->stream[mem] && (rc = g->stream_create(mem, &x->stream[mem])))
		return rc;
	if (!x->staging && (rc = g->alloc_pinned(r->buf_cap, (void **)&x->staging)))
		return rc;
	pthread_mutex_lock(&r->mu);
	uint32_t gen = r->gen;
	void *user = r->user_stream;
	pthread_mutex_unlock(&r->mu);
	if (x->ordered[mem] != gen) {
		if ((rc = g->stream_after(x->stream[mem], user)))
			return rc;
		x->ordered[mem] = gen;
	}
	return 0;
}

/* The open pack holding the first chunk c (reference j0 of t) of a read group, in *out. Returns 0,
 * or the pack's error (naming the tensor and chunk). */
static int group_pack(struct ckpt_reader *r, const struct mf_tensor *t, uint64_t j0,
		      const struct mf_chunk *c, struct pack_fd **out)
{
	pthread_mutex_lock(&r->mu);
	struct pack_fd *p = get_pack(r, c->pack_id);
	pthread_mutex_unlock(&r->mu);
	if (!p)
		return ckpt_fail(CKPT_E_NOMEM, "out of memory");
	if (p->fd < 0) {
		int rc = ckpt_fail(-p->err, "%s", p->msg ? p->msg : "pack unreadable");
		tensor_error(r, t, j0);
		return rc;
	}
	*out = p;
	return 0;
}

/* ---- direct reads: raw chunks straight into the destination ------------------------------ */
/* A raw record at pack offset off has its payload at P = off + REC_HDR_LEN .. E = P + raw_len and
 * ends at R = off + rec_span. One vectored read puts [off, H) in scratch (the header and the
 * first payload bytes), [H, M) in place in the destination and [M, R) in scratch, H and M being P
 * rounded up and E rounded down to the pack's blk; then the two scratch pieces are copied into
 * place and the digest is checked on the destination. O_DIRECT wants every file offset and length
 * a multiple of blk and every address a multiple of mem_align: scratch pieces are packed in
 * multiples of blk from a 4 KiB-aligned buffer, and destinations qualify when
 * (dst - P) % mem_align == 0 (the condition documented at ckpt_reader_restore). */
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
static int direct_plan(const struct ckpt_reader *r, struct rres *x, const struct pack_fd *p,
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

/* After the read planned by direct_plan: checks each record's header; for a chunk read in place,
 * copies the scratch pieces of its payload into place and checks its digest there; decodes the
 * others from scratch. */
static int direct_finish(struct ckpt_reader *r, struct rres *x, const struct pack_fd *p,
			 const struct mf_tensor *t, uint64_t j0, uint64_t j1, uint8_t *dst)
{
	uint64_t used = 0, h = cut_head(p), direct = 0;
	char path[4096];
	store_pack_path(r->s, p->dir, p->id, path, sizeof path);
	for (uint64_t q = j0; q < j1; q++) {
		const struct mf_chunk *c = &r->m.chunks[r->m.refs[t->first_ref + q]];
		uint64_t m = cut_mid_end(p, c), span = rec_span(c->stored_len);
		uint8_t *d = dst + q * r->m.chunk_size;
		const uint8_t *head = x->buf + used, *tail = head + h;
		int rc;
		if (!chunk_direct(p, c, d)) {
			rc = check_record(r, x->codec, head, c, d, path);
			used += span;
		} else if (!(rc = check_hdr(head, c, path))) {
			memcpy(d, head + REC_HDR_LEN, h - REC_HDR_LEN);
			memcpy(d + (m - REC_HDR_LEN), tail, REC_HDR_LEN + c->raw_len - m);
			rc = check_digest(d, c, path);
			used += h + (span - m);
			direct++;
		}
		if (rc) {
			tensor_error(r, t, q);
			return rc;
		}
	}
	pthread_mutex_lock(&r->mu);
	r->direct_chunks += direct;
	r->buffered_chunks += (j1 - j0) - direct;
	pthread_mutex_unlock(&r->mu);
	return 0;
}

void reader_path_counts(const ckpt_reader *r, uint64_t *direct, uint64_t *buffered)
{
	pthread_mutex_lock((pthread_mutex_t *)&r->mu);
	*direct = r->direct_chunks;
	*buffered = r->buffered_chunks;
	pthread_mutex_unlock((pthread_mutex_t *)&r->mu);
}

/* After the buffer read of references [j0, j1) of t from pack p into x->buf: checks and decodes
 * each record into out (raw bytes back to back). */
static int group_decode(struct ckpt_reader *r, struct rres *x, const struct pack_fd *p,
			const struct mf_tensor *t, uint64_t j0, uint64_t j1, uint8_t *out)
{
	pthread_mutex_lock(&r->mu);
	r->buffered_chunks += j1 - j0;
	pthread_mutex_unlock(&r->mu);
	uint64_t at = 0, raw = 0;
	char path[4096];
	store_pack_path(r->s, p->dir, p->id, path, sizeof path);
	for (uint64_t q = j0; q < j1; q++) {
		const struct mf_chunk *cq = &r->m.chunks[r->m.refs[t->first_ref + q]];
		int rc = check_record(r, x->codec, x->buf + at, cq, out + raw, path);
		if (rc) {
			tensor_error(r, t, q);
			return rc;
		}
		at += rec_span(cq->stored_len);
		raw += cq->raw_len;
	}
	return 0;
}

/* Finishes the read of a host group that returned n (planned with niov direct segments, 0: the
 * buffer) as restore_group does: a vectored read refused with EINVAL (the segments met statx's
 * alignment and the kernel still refused them) is read again through the buffer and the pack
 * keeps the buffer path from now on: never fail a restore for it. */
static int group_finish(struct ckpt_reader *r, struct rres *x, struct pack_fd *p,
			const struct mf_tensor *t, uint64_t j0, uint64_t j1, uint64_t len,
			uint8_t *dst, int niov, ssize_t n)
{
	const struct mf_chunk *c = &r->m.chunks[r->m.refs[t->first_ref + j0]];
	int rc;
	if (niov && n == -EINVAL) {
		__atomic_store_n(&p->no_direct, 1, __ATOMIC_RELAXED);
		niov = 0;
		rc = read_group(r, x, p, c->offset, (size_t)len);
	} else {
		rc = read_result(r, p, c->offset, (size_t)len, n);
	}
	if (rc) {
		tensor_error(r, t, j0);
		return rc;
	}
	if (niov)
		return direct_finish(r, x, p, t, j0, j1, dst);
	return group_decode(r, x, p, t, j0, j1, dst + j0 * r->m.chunk_size);
}

/* Restores references [j0, j1) of tensor t (one read group) into dst, waiting for its read. */
static int restore_group(struct ckpt_reader *r, struct rres *x, const struct mf_tensor *t,
			 uint64_t j0, uint64_t j1, uint64_t len, int mem, uint8_t *dst)
{
	const struct mf_chunk *c = &r->m.chunks[r->m.refs[t->first_ref + j0]];
	struct pack_fd *p;
	int rc = group_pack(r, t, j0, c, &p);
	if (rc)
		return rc;
	const struct ckpt_gpu_ops *g = mem == CKPT_MEM_HOST ? NULL : ckpt_gpu_cuda();
	if (!g) {
		/* Host destinations of raw chunks: read in place. */
		int niov = direct_plan(r, x, p, t, j0, j1, dst);
		struct io_req q = read_req(x, p, c->offset, (size_t)len, niov);
		ssize_t n = io_engine_run(r->eng, &q);
		return group_finish(r, x, p, t, j0, j1, len, dst, niov, n);
	}
	/* CUDA: decode into pinned staging, then one copy. */
	if ((rc = restore_prepare(r, x, g, mem)))
		return rc;
	if ((rc = read_group(r, x, p, c->offset, (size_t)len))) {
		tensor_error(r, t, j0);
		return rc;
	}
	if ((rc = group_decode(r, x, p, t, j0, j1, x->staging)))
		return rc;
	uint64_t raw = 0;
	for (uint64_t q = j0; q < j1; q++)
		raw += r->m.chunks[r->m.refs[t->first_ref + q]].raw_len;
	if ((rc = g->copy_h2d(dst + j0 * r->m.chunk_size, x->staging, raw, x->stream[mem])) ||
	    (rc = g->stream_sync(x->stream[mem])))
		return rc;
	return 0;
}

static int check_dst(const ckpt_reader *r, size_t i, int mem, const void *dst, uint64_t size)
{
	const struct mf_tensor *t = &r->m.tensors[i];
	if (mem != CKPT_MEM_HOST && (mem < 0 || mem >= 16))
		return ckpt_fail(CKPT_E_INVAL, "restore '%s': invalid memory type %d", t->name, mem);
	if (mem != CKPT_MEM_HOST && !ckpt_gpu_cuda())
		return ckpt_fail(CKPT_E_UNSUPPORTED, "restore '%s' to CUDA device %d: %s", t->name,
				 mem, ckpt_gpu_cuda_error());
	if (size != t->nbytes)
		return ckpt_fail(CKPT_E_INVAL, "restore '%s': buffer of %llu bytes, tensor has %llu",
				 t->name, (unsigned long long)size, (unsigned long long)t->nbytes);
	if (t->nbytes && !dst)
		return ckpt_fail(CKPT_E_INVAL, "restore '%s': NULL destination", t->name);
	if (t->nbytes)
		return ckpt_gpu_check_mem(mem, dst, "restore", t->name);
	return 0;
}

static void count_restored(struct ckpt_reader *r, const struct mf_tensor *t)
{
	pthread_mutex_lock(&r->mu);
	r->st.tensors++;
	r->st.logical_bytes += t->nbytes;
	r->st.chunks += t->nrefs;
	r->st.bytes_hashed += t->nbytes;
	pthread_mutex_unlock(&r->mu);
}

CKPT_API int ckpt_reader_after_stream(ckpt_reader *r, void *stream)
{
	if (!r)
		return ckpt_fail(CKPT_E_INVAL, "restore: NULL reader");
	pthread_mutex_lock(&r->mu);
	r->user_stream = stream;
	pthread_mutex_unlock(&r->mu);
	return 0;
}

/* ---- reads in flight across groups and tensors -------------------------------------------- */
/* One read group to restore: references [j0, j1) of tensor ti (len bytes on disk) into dst. */
struct rjob {
	size_t ti;
	uint64_t j0, j1, len;
	int mem;
	uint8_t *dst;
	bool last;             /* the tensor's last group: counts the tensor */
};

/* A group read in flight: its job, its own read buffer and segments, its request. */
struct rslot {
	struct rjob j;
	struct rres x;         /* buf and iov are the slot's; codec is the pipe's */
	struct pack_fd *p;
	int niov;
	bool busy;             /* its read is in flight or not yet checked */
	uint64_t seq;          /* the job's number in the order next() handed it out */
	struct rslot *next_done; /* the pipe's completed reads (pipe mu) */
	struct io_req q;
	struct rpipe *pp;
};

/* The reads one thread keeps in flight: n slots, filled in job order, each checked as soon as
 * its read completes (in any order: a slow read does not hold back the slots behind it). The
 * next groups' reads are at the device while one is hashed; memory is n read buffers whatever
 * the tensor's size. */
struct rpipe {
	struct ckpt_reader *r;
	pthread_mutex_t mu;
	pthread_cond_t cv;
	struct rslot *slot;
	unsigned n, busy;
	struct rslot *done_head, *done_tail; /* completed, not yet checked (mu) */
	uint64_t seq;          /* jobs handed out so far */
	struct rres *sync_x;   /* CUDA groups: restored one at a time through its staging */
	char msg[1024];        /* the message of the first error in job order */
};

static void rpipe_free(struct rpipe *pp)
{
	if (!pp)
		return;
	for (unsigned k = 0; k < pp->n; k++) {
		pp->slot[k].x.codec = NULL;
		rres_free(&pp->slot[k].x);
	}
	free(pp->slot);
	pthread_mutex_destroy(&pp->mu);
	pthread_cond_destroy(&pp->cv);
	free(pp);
}

/* A pipe of n slots sharing codec (used by one thread). Returns NULL when out of memory. */
static struct rpipe *rpipe_create(struct ckpt_reader *r, unsigned n, ckpt_codec_ctx *codec)
{
	struct rpipe *pp = calloc(1, sizeof *pp);
	if (!pp)
		return NULL;
	pp->r = r;
	pthread_mutex_init(&pp->mu, NULL);
	pthread_cond_init(&pp->cv, NULL);
	pp->slot = calloc(n, sizeof *pp->slot);
	if (!pp->slot) {
		rpipe_free(pp);
		return NULL;
	}
	pp->n = n;
	for (unsigned k = 0; k < n; k++) {
		pp->slot[k].pp = pp;
		pp->slot[k].x.codec = codec;
		if (!(pp->slot[k].x.buf = ckpt_aligned_alloc(r->buf_cap))) {
			rpipe_free(pp);
			return NULL;
		}
	}
	return pp;
}

/* Engine thread: the slot's read completed. */
static void rslot_done(struct io_req *q)
{
	struct rslot *sl = q->arg;
	struct rpipe *pp = sl->pp;
	pthread_mutex_lock(&pp->mu);
	sl->next_done = NULL;
	if (pp->done_tail)
		pp->done_tail->next_done = sl;
	else
		pp->done_head = sl;
	pp->done_tail = sl;
	pthread_cond_signal(&pp->cv);
	pthread_mutex_unlock(&pp->mu);
}

static void inflight_add(struct ckpt_reader *r, int64_t reads, int64_t bytes)
{
	uint64_t n = __atomic_add_fetch(&r->inflight, (uint64_t)reads, __ATOMIC_RELAXED);
	uint64_t b = __atomic_add_fetch(&r->inflight_bytes, (uint64_t)bytes, __ATOMIC_RELAXED);
	if (reads <= 0)
		return;
	uint64_t m = __atomic_load_n(&r->inflight_max, __ATOMIC_RELAXED);
	while (n > m && !__atomic_compare_exchange_n(&r->inflight_max, &m, n, true,
						     __ATOMIC_RELAXED, __ATOMIC_RELAXED))
		;
	m = __atomic_load_n(&r->inflight_bytes_max, __ATOMIC_RELAXED);
	while (b > m && !__atomic_compare_exchange_n(&r->inflight_bytes_max, &m, b, true,
						     __ATOMIC_RELAXED, __ATOMIC_RELAXED))
		;
}

void reader_inflight_max(const ckpt_reader *r, uint64_t *reads, uint64_t *bytes)
{
	*reads = __atomic_load_n(&r->inflight_max, __ATOMIC_RELAXED);
	*bytes = __atomic_load_n(&r->inflight_bytes_max, __ATOMIC_RELAXED);
}

/* Starts job j (number seq): a host group's read is submitted into a free slot (one must
 * exist); a CUDA group is restored at once. Returns 0 or the error (the pack's, or the CUDA
 * group's). */
static int rpipe_start(struct rpipe *pp, const struct rjob *j, uint64_t seq)
{
	struct ckpt_reader *r = pp->r;
	const struct mf_tensor *t = &r->m.tensors[j->ti];
	if (j->mem != CKPT_MEM_HOST) {
		return restore_group(r, pp->sync_x, t, j->j0, j->j1, j->len, j->mem, j->dst);
	}
	struct rslot *sl = pp->slot;
	while (sl->busy)
		sl++;
	const struct mf_chunk *c = &r->m.chunks[r->m.refs[t->first_ref + j->j0]];
	int rc = group_pack(r, t, j->j0, c, &sl->p);
	if (rc)
		return rc;
	sl->j = *j;
	sl->niov = direct_plan(r, &sl->x, sl->p, t, j->j0, j->j1, j->dst);
	sl->q = read_req(&sl->x, sl->p, c->offset, (size_t)j->len, sl->niov);
	sl->q.done = rslot_done;
	sl->q.arg = sl;
	sl->seq = seq;
	sl->busy = true;
	pp->busy++;
	inflight_add(r, 1, (int64_t)j->len);
	io_engine_submit(r->eng, &sl->q); /* may complete before it returns */
	return 0;
}

/* Waits for a read to complete, checks and places its group, frees its slot. Returns 0 or the
 * group's error; *seq gets its job number. */
static int rpipe_finish_next(struct rpipe *pp, uint64_t *seq)
{
	struct ckpt_reader *r = pp->r;
	pthread_mutex_lock(&pp->mu);
	while (!pp->done_head)
		pthread_cond_wait(&pp->cv, &pp->mu);
	struct rslot *sl = pp->done_head;
	if (!(pp->done_head = sl->next_done))
		pp->done_tail = NULL;
	pthread_mutex_unlock(&pp->mu);
	const struct mf_tensor *t = &r->m.tensors[sl->j.ti];
	int rc = group_finish(r, &sl->x, sl->p, t, sl->j.j0, sl->j.j1, sl->j.len, sl->j.dst,
			      sl->niov, sl->q.res);
	inflight_add(r, -1, -(int64_t)sl->j.len);
	*seq = sl->seq;
	sl->busy = false;
	pp->busy--;
	return rc;
}

/* Keeps the error of the earliest job: failures are seen in completion order. */
static void rpipe_error(struct rpipe *pp, int rc, uint64_t seq, int *err, uint64_t *err_seq)
{
	if (!rc || seq >= *err_seq)
		return;
	*err = rc;
	*err_seq = seq;
	snprintf(pp->msg, sizeof pp->msg, "%s", ckpt_errmsg());
}

/* Restores the jobs next() hands out (false: none left) with up to pp->n reads in flight.
 * Returns 0 once every group is checked, or the error of the first failed group in job order:
 * after a failure no job starts, and the reads in flight are still checked (an earlier job's
 * may fail too; and their buffers are the pipe's). */
static int rpipe_run(struct rpipe *pp, bool (*next)(void *arg, struct rjob *j), void *arg)
{
	int err = 0;
	uint64_t err_seq = UINT64_MAX, seq;
	bool more = true;
	for (;;) {
		while (!err && more && pp->busy < pp->n) {
			struct rjob j;
			if ((more = next(arg, &j))) {
				seq = pp->seq++;
				rpipe_error(pp, rpipe_start(pp, &j, seq), seq, &err, &err_seq);
			}
		}
		if (!pp->busy)
			break;
		int rc = rpipe_finish_next(pp, &seq);
		rpipe_error(pp, rc, seq, &err, &err_seq);
	}
	return err ? ckpt_fail(-err, "%s", pp->msg) : 0;
}

/* ckpt_reader_restore's jobs: the read groups of one tensor in order. */
struct tensor_jobs {
	struct ckpt_reader *r;
	size_t ti;
	uint64_t j;
	uint8_t *dst;
};

static bool tensor_next(void *arg, struct rjob *out)
{
	struct tensor_jobs *tj = arg;
	const struct mf_tensor *t = &tj->r->m.tensors[tj->ti];
	if (tj->j >= t->nrefs)
		return false;
	uint64_t len, k = group_end(tj->r, t, tj->j, &len);
	*out = (struct rjob){.ti = tj->ti, .j0 = tj->j, .j1 = k, .len = len, .mem = CKPT_MEM_HOST,
			     .dst = tj->dst, .last = k == t->nrefs};
	tj->j = k;
	return true;
}

CKPT_API int ckpt_reader_restore(ckpt_reader *r, size_t i, int mem, void *dst, uint64_t size)
{
	if (!r || i >= r->m.n_tensors)
		return ckpt_fail(CKPT_E_INVAL, "restore: tensor index %zu out of range", i);
	int rc = check_dst(r, i, mem, dst, size);
	if (rc)
		return rc;
	const struct mf_tensor *t = &r->m.tensors[i];
	double t0 = ckpt_now();
	/* The staging buffer, streams and read slots live as long as the reader: no pinned
	 * allocation, stream creation or buffer allocation per call. */
	if (!r->res && !(r->res = calloc(1, sizeof *r->res)))
		return ckpt_fail(CKPT_E_NOMEM, "out of memory");
	r->res->buf = r->buf;
	r->res->codec = r->codec;
	r->gen++;
	if (mem == CKPT_MEM_HOST && t->nrefs > 1) {
		/* Host: the tensor's next groups are read while one is hashed. */
		if (!r->pipe && !(r->pipe = rpipe_create(r, restore_slots(r), r->codec)))
			return ckpt_fail(CKPT_E_NOMEM, "out of memory");
		struct tensor_jobs tj = {.r = r, .ti = i, .dst = dst};
		rc = rpipe_run(r->pipe, tensor_next, &tj);
	} else {
		for (uint64_t j = 0; j < t->nrefs && !rc;) {
			uint64_t len, k = group_end(r, t, j, &len);
			rc = restore_group(r, r->res, t, j, k, len, mem, dst);
			j = k;
		}
	}
	if (rc)
		return rc;
	count_restored(r, t);
	/* One restore runs on the caller's thread: stats.threads counts the threads that read. */
	r->st.threads = MAX(r->st.threads, 1u);
	r->st.seconds += ckpt_now() - t0;
	return 0;
}

/* ---- parallel restore --------------------------------------------------------------------- */
struct rall {
	struct ckpt_reader *r;
	pthread_mutex_t mu;
	struct rjob *jobs;
	size_t njobs, next;    /* jobs handed out (mu) */
	unsigned slots;        /* per thread */
	int err;               /* the first error (mu), which stops handing out jobs */
	char msg[1024];
};

static bool rall_next(void *arg, struct rjob *out)
{
	struct rall *a = arg;
	pthread_mutex_lock(&a->mu);
	bool more = !a->err && a->next < a->njobs;
	if (more)
		*out = a->jobs[a->next++];
	pthread_mutex_unlock(&a->mu);
	return more;
}

struct rtask {
	struct task task;
	struct rall *all;
};

/* One restore_all thread: its own pipe and staging, fed from the shared job list. */
static void rthread_run(struct task *tk)
{
	struct rall *a = ((struct rtask *)tk)->all;
	struct ckpt_reader *r = a->r;
	struct rres x = {0};
	x.codec = ckpt_codec_ctx_create(r->m.chunk_size);
	x.buf = ckpt_aligned_alloc(r->buf_cap);
	struct rpipe *pp = x.codec && x.buf ? rpipe_create(r, a->slots, x.codec) : NULL;
	int rc;
	if (!pp) {
		rc = ckpt_fail(CKPT_E_NOMEM, "out of memory");
	} else {
		pp->sync_x = &x;
		rc = rpipe_run(pp, rall_next, a);
	}
	rpipe_free(pp);
	rres_free(&x);
	pthread_mutex_lock(&a->mu);
	if (rc && !a->err) {
		a->err = rc;
		snprintf(a->msg, sizeof a->msg, "%s", ckpt_errmsg());
	}
	pthread_mutex_unlock(&a->mu);
}

/* Plans restore_all: one job per read group, destinations asked for in tensor order. Returns 0
 * or the first error (of dst_for's destinations, or out of memory). */
static int rall_plan(struct rall *a, ckpt_dst_fn dst_for, void *arg)
{
	struct ckpt_reader *r = a->r;
	size_t cap = 64;
	if (!(a->jobs = malloc(cap * sizeof *a->jobs)))
		return ckpt_fail(CKPT_E_NOMEM, "out of memory");
	for (size_t i = 0; i < r->m.n_tensors; i++) {
		ckpt_tensor_info info;
		ckpt_reader_tensor(r, i, &info);
		int mem = CKPT_MEM_HOST, rc;
		void *dst = dst_for(i, &info, &mem, arg);
		if (!dst && info.nbytes)
			continue;
		if ((rc = check_dst(r, i, mem, dst, info.nbytes)))
			return rc;
		const struct mf_tensor *t = &r->m.tensors[i];
		if (!t->nrefs)
			count_restored(r, t);
		for (uint64_t j = 0; j < t->nrefs;) {
			uint64_t len, k = group_end(r, t, j, &len);
			if (a->njobs == cap) {
				struct rjob *n = realloc(a->jobs, (cap *= 2) * sizeof *n);
				if (!n)
					return ckpt_fail(CKPT_E_NOMEM, "out of memory");
				a->jobs = n;
			}
			a->jobs[a->njobs++] = (struct rjob){.ti = i, .j0 = j, .j1 = k, .len = len,
							    .mem = mem, .dst = dst,
							    .last = k == t->nrefs};
			j = k;
		}
	}
	return 0;
}

/* The read groups of every tensor go to restore_threads threads, each keeping its share of
 * restore_slots reads in flight (rpipe_run), so reads stay queued across groups and tensors. */
CKPT_API int ckpt_reader_restore_all(ckpt_reader *r, ckpt_dst_fn dst_for, void *arg)
{
	if (!r || !dst_for)
		return ckpt_fail(CKPT_E_INVAL, "restore_all: NULL reader or callback");
	double t0 = ckpt_now();
	pthread_mutex_lock(&r->mu);
	r->gen++;
	pthread_mutex_unlock(&r->mu);
	struct rall a = {.r = r};
	pthread_mutex_init(&a.mu, NULL);
	int rc = rall_plan(&a, dst_for, arg);
	if (!rc && a.njobs) {
		unsigned n = (unsigned)MIN((size_t)restore_threads(r), a.njobs);
		a.slots = MAX(restore_slots(r) / n, 2u);
		struct rtask *tasks = calloc(n, sizeof *tasks);
		struct workers *w = tasks ? workers_create(n) : NULL;
		if (!w) {
			rc = ckpt_fail(CKPT_E_NOMEM, "cannot start restore threads");
		} else {
			r->st.threads = MAX(r->st.threads, workers_count(w));
			for (unsigned k = 0; k < n; k++) {
				tasks[k] = (struct rtask){.task.fn = rthread_run, .all = &a};
				workers_submit(w, &tasks[k].task);
			}
			workers_destroy(w); /* runs the tasks to completion */
			if (a.err)
				rc = ckpt_fail(-a.err, "%s", a.msg);
		}
		/* The tensors count once all their groups are checked: none when the call fails. */
		for (size_t k = 0; !rc && k < a.njobs; k++)
			if (a.jobs[k].last)
				count_restored(r, &r->m.tensors[a.jobs[k].ti]);
		free(tasks);
	}
	free(a.jobs);
	pthread_mutex_destroy(&a.mu);
	r->st.seconds += ckpt_now() - t0;
	return rc;
}

/* The bytes between a record's end and its 4 KiB boundary are written as zeros: anything else
 * there is damage the digest cannot see. */
static int check_padding(const uint8_t *rec, const struct mf_chunk *c, const char *path)
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
static int check_pack_tail(struct ckpt_reader *r, struct rres *x, struct pack_fd *p)
{
	char path[4096];
	store_pack_path(r->s, p->dir, p->id, path, sizeof path);
	struct stat st;
	if (fstat(p->fd, &st))
		return ckpt_fail(CKPT_E_IO, "stat %s: %s", path, strerror(errno));
	uint64_t size = (uint64_t)st.st_size, off = PACK_HDR_LEN;
	while (off < size) {
		struct rec_hdr h;
		int rc = size - off >= 4096 ? read_group(r, x, p, off, 4096) : 0;
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
static long report_pack_tails(struct ckpt_reader *r, struct rres *x, const int *state,
			      ckpt_damage_fn on_damage, void *arg)
{
	long bad = 0;
	for (size_t i = 0; i < r->nfds; i++) {
		struct pack_fd *p = r->fds[i];
		bool chunk_damage = false;
		for (uint32_t c = 0; c < r->m.n_chunks && !chunk_damage; c++)
			chunk_damage = r->m.chunks[c].pack_id == p->id && state[c] != 1;
		if (p->fd < 0 || chunk_damage || !check_pack_tail(r, x, p))
			continue;
		bad++;
		if (on_damage) {
			char path[4096];
			store_pack_path(r->s, p->dir, p->id, path, sizeof path);
			ckpt_damage d = {.step = r->m.step, .file = path, .error = CKPT_E_CORRUPT,
					 .message = ckpt_errmsg()};
			on_damage(&d, arg);
		}
	}
	return bad;
}

CKPT_API long ckpt_reader_verify(ckpt_reader *r, ckpt_damage_fn on_damage,
				 ckpt_progress_fn on_progress, void *arg)
{
	return ckpt_reader_verify_cached(r, NULL, on_damage, on_progress, arg);
}

/* The state of chunk c (1 intact, else a negative CKPT_E_* code; *msg its message): from the
 * cache when it knows the record, else read and checked (and put in the cache). */
static int verify_chunk(struct ckpt_reader *r, ckpt_verify_cache *cache, struct rres *x,
			const struct mf_chunk *c, const char *path, char **own, const char **msg)
{
	struct pack_fd *p = get_pack(r, c->pack_id);
	int rc = cache ? vcache_get(cache, c->pack_id, c->offset, &c->digest, msg) : 0;
	if (rc)
		return rc;
	if (!p)
		rc = ckpt_fail(CKPT_E_NOMEM, "out of memory");
	else if (p->fd < 0)
		rc = ckpt_fail(-p->err, "%s", p->msg ? p->msg : "pack unreadable");
	else if (!(rc = read_group(r, x, p, c->offset, (size_t)rec_span(c->stored_len))) &&
		 !(rc = check_record(r, r->codec, r->buf, c, r->scratch, path)))
		rc = check_padding(r->buf, c, path);
	int state = rc ? rc : 1;
	*own = rc ? strdup(ckpt_errmsg()) : NULL;
	*msg = *own;
	if (cache && vcache_put(cache, c->pack_id, c->offset, &c->digest, state, *own,
				p && p->fd >= 0 ? rec_span(c->stored_len) : 0))
		return -CKPT_E_NOMEM;
	return state;
}

CKPT_API long ckpt_reader_verify_cached(ckpt_reader *r, ckpt_verify_cache *cache,
					ckpt_damage_fn on_damage, ckpt_progress_fn on_progress,
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
			struct pack_fd *p = get_pack(r, c->pack_id);
			store_pack_path(r->s, p ? p->dir : 0, c->pack_id, path, sizeof path);
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

CKPT_API int ckpt_reader_chunk(const ckpt_reader *r, size_t i, uint64_t j, ckpt_chunk_info *out)
{
	if (!r || i >= r->m.n_tensors || j >= r->m.tensors[i].nrefs)
		return ckpt_fail(CKPT_E_INVAL, "chunk %llu of tensor %zu out of range",
				 (unsigned long long)j, i);
	const struct mf_chunk *c = &r->m.chunks[r->m.refs[r->m.tensors[i].first_ref + j]];
	memcpy(out->digest, c->digest.b, 16);
	out->pack_id = c->pack_id;
	out->offset = c->offset;
	out->raw_bytes = c->raw_len;
	out->stored_bytes = c->stored_len;
	out->disk_bytes = rec_span(c->stored_len);
	out->codec = c->codec;
	out->is_new = (c->flags & MF_CHUNK_NEW) != 0;
	return 0;
}

/* ---- ranged restore (a slice of a tensor) ------------------------------------------------- */
/* Reads references [j0, j1) of tensor t (one read group, len bytes on disk) and copies the part
 * of each decoded chunk that falls in [offset, offset + size) to dst + (its offset - offset).
 * Each chunk is decoded into tmp (one chunk's worth), so memory stays one chunk whatever the
 * range. */
static int range_group(struct ckpt_reader *r, const struct mf_tensor *t, uint64_t j0,
		       uint64_t j1, uint64_t len, uint64_t offset, uint64_t size, uint8_t *tmp,
		       uint8_t *dst)
{
	const uint64_t cs = r->m.chunk_size;
	const struct mf_chunk *c = &r->m.chunks[r->m.refs[t->first_ref + j0]];
	struct pack_fd *p;
	int prc = group_pack(r, t, j0, c, &p);
	if (prc)
		return prc;
	struct rres x = {.buf = r->buf, .codec = r->codec};
	int rc = read_group(r, &x, p, c->offset, (size_t)len);
	if (rc) {
		tensor_error(r, t, j0);
		return rc;
	}
	uint64_t at = 0;
	for (uint64_t q = j0; q < j1; q++) {
		const struct mf_chunk *cq = &r->m.chunks[r->m.refs[t->first_ref + q]];
		char path[4096];
		store_pack_path(r->s, p->dir, cq->pack_id, path, sizeof path);
		if ((rc = check_record(r, x.codec, x.buf + at, cq, tmp, path))) {
			tensor_error(r, t, q);
			return rc;
		}
		at += rec_span(cq->stored_len);
		uint64_t lo = MAX(q * cs, offset), hi = MIN(q * cs + cq->raw_len, offset + size);
		if (lo < hi)
			memcpy(dst + (lo - offset), tmp + (lo - q * cs), hi - lo);
	}
	return 0;
}

CKPT_API int ckpt_reader_restore_range(ckpt_reader *r, size_t i, uint64_t offset, void *dst,
				       uint64_t size)
{
	if (!r || i >= r->m.n_tensors)
		return ckpt_fail(CKPT_E_INVAL, "restore: tensor index %zu out of range", i);
	const struct mf_tensor *t = &r->m.tensors[i];
	if (offset > t->nbytes || size > t->nbytes - offset)
		return ckpt_fail(CKPT_E_INVAL, "restore '%s': bytes %llu..%llu are outside its %llu bytes",
				 t->name, (unsigned long long)offset,
				 (unsigned long long)(offset + size), (unsigned long long)t->nbytes);
	if (!size)
		return 0;
	if (!dst)
		return ckpt_fail(CKPT_E_INVAL, "restore '%s': NULL destination", t->name);
	const uint64_t cs = r->m.chunk_size;
	uint64_t j = offset / cs, j1 = (offset + size + cs - 1) / cs;
	uint8_t *tmp = malloc(cs);
	if (!tmp)
		return ckpt_fail(CKPT_E_NOMEM, "out of memory");
	double t0 = ckpt_now();
	int rc = 0;
	while (j < j1 && !rc) {
		uint64_t len, k = group_end(r, t, j, &len);
		if (k > j1) {  /* the group runs past the range: read only up to j1 */
			len = 0;
			for (uint64_t q = j; q < j1; q++)
				len += rec_span(r->m.chunks[r->m.refs[t->first_ref + q]].stored_len);
			k = j1;
		}
		rc = range_group(r, t, j, k, len, offset, size, tmp, dst);
		j = k;
	}
	free(tmp);
	if (!rc) {
		r->st.logical_bytes += size;
		r->st.chunks += j1 - offset / cs;
		r->st.threads = MAX(r->st.threads, 1u);
		r->st.seconds += ckpt_now() - t0;
	}
	return rc;
}
