/* Store directory: create/open, manifest files, listing, the dedup index (the writer lock is
 * lock.c). */
#include "store/store.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/stat.h>
#include <unistd.h>

#include "common/common.h"
#include "store/marker.h"

void store_pack_path(const struct ckpt_store *s, unsigned dir, uint32_t pack_id, char *buf, size_t len)
{
	snprintf(buf, len, "%s/%08u.pack", s->pack_dirs[dir < s->ndirs ? dir : 0], pack_id);
}

void store_mf_name(uint64_t step, char *buf, size_t len)
{
	snprintf(buf, len, "%020llu.ckpt", (unsigned long long)step);
}

void dist_part_path(const struct ckpt_store *s, uint64_t step, int rank, char *buf, size_t len)
{
	if (rank < 0)
		snprintf(buf, len, "%s/%s/%020" PRIu64, s->path, PART_DIR, step);
	else
		snprintf(buf, len, "%s/%s/%020" PRIu64 "/%d.part", s->path, PART_DIR, step, rank);
}

static char *join(const char *a, const char *b)
{
	size_t n = strlen(a) + strlen(b) + 2;
	char *p = malloc(n);
	if (p)
		snprintf(p, n, "%s/%s", a, b);
	return p;
}

/* make_dir, and when it created the directory, an fsync of its parent: a new directory's entry
 * is durable only then (the store's header or a pack may be durable in a directory that a
 * power cut makes disappear). */
static int make_dir_durable(const char *p)
{
	if (mkdir(p, 0755)) {
		if (errno == EEXIST)
			return 0;
		int e = errno;
		return ckpt_fail(ckpt_errno_code(e), "create directory %s: %s", p, strerror(e));
	}
	char *parent = strdup(p);
	if (!parent)
		return ckpt_fail(CKPT_E_NOMEM, "out of memory");
	char *slash = strrchr(parent, '/');
	while (slash && slash > parent && slash[1] == 0) { /* "a/b/" */
		*slash = 0;
		slash = strrchr(parent, '/');
	}
	int rc = io_fsync_dir(!slash ? "." : slash == parent ? "/" : (*slash = 0, parent));
	free(parent);
	return rc;
}

/* packs/, manifests/ and parts/ must be the store's own directories: through a symbolic link, gc
 * would act on another store's files and saves would write where the operator does not look.
 * what names them in the message. */
static int refuse_symlink_of(const char *dir, const char *what)
{
	struct stat st;
	if (lstat(dir, &st)) {
		int e = errno;
		if (e == ENOENT)
			return 0; /* the caller reports a missing directory in its own words */
		return ckpt_fail(ckpt_errno_code(e), "%s: %s", dir, strerror(e));
	}
	if (S_ISLNK(st.st_mode))
		return ckpt_fail(CKPT_E_PERM, "%s is a symbolic link; refusing it (a store's %s must be "
				 "its own directories)", dir, what);
	if (!S_ISDIR(st.st_mode))
		return ckpt_fail(CKPT_E_CORRUPT, "%s is not a directory", dir);
	return 0;
}

static int refuse_symlink(const char *dir)
{
	return refuse_symlink_of(dir, "packs/ and manifests/");
}

int store_part_dir(struct ckpt_store *s, uint64_t step, char *dir, size_t len)
{
	char top[4096];
	snprintf(top, sizeof top, "%s/%s", s->path, PART_DIR);
	dist_part_path(s, step, -1, dir, len);
	/* Each is checked before anything is created or written under it: a symlinked parts/ or
	 * parts/<step> would put the part (and a new step directory) outside the store. parts/
	 * is made durable when created (once per store); parts/<step> is not, here: rank 0 creates
	 * it at begin, where the caller waits, and every part write fsyncs parts/ in the background
	 * (dist_write_part). */
	const char *what = "parts/ and parts/<step>";
	int rc = make_dir_durable(top);
	if (!rc)
		rc = refuse_symlink_of(top, what);
	if (!rc && mkdir(dir, 0755) && errno != EEXIST)
		rc = ckpt_fail(ckpt_errno_code(errno), "create directory %s: %s", dir, strerror(errno));
	if (!rc)
		rc = refuse_symlink_of(dir, what);
	return rc;
}

int dist_write_part(struct ckpt_store *s, uint64_t step, const void *buf, size_t len, int *renamed)
{
	char dir[4096], name[32];
	snprintf(name, sizeof name, "%u.part", s->part_rank);
	*renamed = 0;
	int rc = store_part_dir(s, step, dir, sizeof dir);
	if (!rc) { /* parts/<step>'s entry durable before the part is reported durable */
		char top[4096];
		snprintf(top, sizeof top, "%s/%s", s->path, PART_DIR);
		rc = io_fsync_dir(top);
	}
	if (rc)
		return rc;
	/* Never over another file: rank 0's claim cleared the directory at begin, so a part already
	 * there is another save's (a second job on this step, or a rank of a dead save still
	 * running), and replacing it could damage a checkpoint that job commits. */
	rc = io_write_new(dir, name, buf, len, renamed);
	if (rc == 1)
		rc = ckpt_fail(CKPT_E_EXISTS, "checkpoint %" PRIu64 ": part %s/%s exists already: "
			       "another save of this step wrote it (a second job, or a rank of a "
			       "killed save still running)", step, dir, name);
	return rc;
}

static void random_uuid(uint8_t out[16])
{
	int fd = open("/dev/urandom", O_RDONLY | O_CLOEXEC);
	if (fd < 0 || read(fd, out, 16) != 16) {
		uint64_t t = (uint64_t)ckpt_wall_ns() ^ ((uint64_t)getpid() << 32);
		put_le64(out, t);
		put_le64(out + 8, t * 0x9e3779b97f4a7c15ull);
	}
	if (fd >= 0)
		close(fd);
}

/* Creates the layout in an existing, empty (or new) directory. The header is written last and
 * atomically, so a half-created store is recognised as "not a store" and can be created again. */
static int create_layout(struct ckpt_store *s)
{
	int rc;
	if ((rc = make_dir_durable(s->path)) || (rc = make_dir_durable(s->pack_dir)) ||
	    (rc = make_dir_durable(s->mf_dir)))
		return rc;
	struct store_hdr h = {
		.version = CKPT_FORMAT_VERSION,
		.chunk_size = s->opt.chunk_size ? (uint32_t)s->opt.chunk_size : (1u << 20),
		.codec = s->opt.compress > 0 ? CKPT_COMPRESS_ZSTD : CKPT_COMPRESS_NONE,
		.zstd_level = (uint8_t)(s->opt.zstd_level ? s->opt.zstd_level : 1),
		.created = ckpt_wall_ns() / 1000000000,
	};
	random_uuid(h.uuid);
	uint8_t buf[STORE_HDR_LEN];
	store_hdr_encode(&h, buf);
	if ((rc = io_fsync_dir(s->pack_dir)) || (rc = io_fsync_dir(s->mf_dir)))
		return rc;
	/* Ranks may create the same store at once: the first header wins, the others read it. */
	rc = io_write_new(s->path, STORE_FILE, buf, sizeof buf, NULL);
	return rc > 0 ? 0 : rc;
}

static int dir_is_empty(const char *p)
{
	DIR *d = opendir(p);
	if (!d)
		return 0;
	struct dirent *e;
	int empty = 1;
	while ((e = readdir(d)))
		if (strcmp(e->d_name, ".") && strcmp(e->d_name, "..") &&
		    strcmp(e->d_name, PACK_DIR) && strcmp(e->d_name, MF_DIR) &&
		    strncmp(e->d_name, "." STORE_FILE ".tmp", 10))
			empty = 0;
	closedir(d);
	return empty;
}

#define DATADIRS_FILE "datadirs"

static int add_pack_dir(struct ckpt_store *s, const char *data_dir)
{
	/* Recorded paths must mean the same from any working directory. */
	char abs[8192];
	if (data_dir[0] != '/') {
		char cwd[4096];
		if (!getcwd(cwd, sizeof cwd))
			return ckpt_fail(CKPT_E_IO, "data directory %s: cannot resolve: %s", data_dir,
					 strerror(errno));
		snprintf(abs, sizeof abs, "%s/%s", cwd, data_dir);
		data_dir = abs;
	}
	for (unsigned i = 1; i < s->ndirs; i++)
		if (!strcmp(s->pack_dirs[i], data_dir))
			return 0;
	char *p = malloc(strlen(data_dir) + sizeof "/" PACK_DIR);
	if (!p)
		return ckpt_fail(CKPT_E_NOMEM, "out of memory");
	sprintf(p, "%s/%s", data_dir, PACK_DIR);
	for (unsigned i = 0; i < s->ndirs; i++)
		if (!strcmp(s->pack_dirs[i], p)) {
			free(p);
			return 0;
		}
	s->pack_dirs[s->ndirs++] = p;
	return 1;
}

/* Pack directories: the store's own, those recorded in STORE/datadirs, and those the options name
 * (recorded on the way, so that readers find packs without being told). */
static int setup_dirs(struct ckpt_store *s, const ckpt_options *opts)
{
	s->pack_dirs = calloc(MAX_DATA_DIRS + 1, sizeof *s->pack_dirs);
	if (!s->pack_dirs || !(s->pack_dirs[0] = strdup(s->pack_dir)))
		return ckpt_fail(CKPT_E_NOMEM, "out of memory");
	s->ndirs = 1;
	char fp[4096];
	snprintf(fp, sizeof fp, "%s/%s", s->path, DATADIRS_FILE);
	uint8_t *buf = NULL;
	size_t len = 0;
	int rc = io_slurp(fp, 1 << 20, &buf, &len);
	if (rc && rc != -CKPT_E_NOTFOUND)
		return rc;
	unsigned recorded = 0;
	if (!rc) {
		char *save = NULL;
		char *text = (char *)buf;
		text[len ? len - 1 : 0] = text[len ? len - 1 : 0] == '\n' ? 0 : text[len ? len - 1 : 0];
		char *copy = strndup(text, len);
		free(buf);
		if (!copy)
			return ckpt_fail(CKPT_E_NOMEM, "out of memory");
		for (char *line = strtok_r(copy, "\n", &save); line; line = strtok_r(NULL, "\n", &save)) {
			if (s->ndirs > MAX_DATA_DIRS) {
				free(copy);
				return ckpt_fail(CKPT_E_CORRUPT, "%s: more than %d data directories", fp,
						 MAX_DATA_DIRS);
			}
			if ((rc = add_pack_dir(s, line)) < 0) {
				free(copy);
				return rc;
			}
		}
		free(copy);
		recorded = s->ndirs;
	}
	bool changed = false;
	for (unsigned i = 0; opts && i < opts->ndata_dirs; i++) {
		if (s->ndirs > MAX_DATA_DIRS)
			return ckpt_fail(CKPT_E_INVAL, "more than %d data directories", MAX_DATA_DIRS);
		if ((rc = add_pack_dir(s, opts->data_dirs[i])) < 0)
			return rc;
		changed |= rc == 1;
	}
	if (!changed || s->opt.read_only)
		return 0;
	for (unsigned i = recorded ? recorded : 1; i < s->ndirs; i++) {
		char *d = strdup(s->pack_dirs[i]);
		if (!d)
			return ckpt_fail(CKPT_E_NOMEM, "out of memory");
		char *slash = strrchr(d, '/');
		*slash = 0;
		rc = make_dir_durable(d);
		free(d);
		if (rc || (rc = make_dir_durable(s->pack_dirs[i])))
			return rc;
	}
	size_t cap = 1;
	for (unsigned i = 1; i < s->ndirs; i++)
		cap += strlen(s->pack_dirs[i]) + 1;
	char *out = malloc(cap), *o = out;
	if (!out)
		return ckpt_fail(CKPT_E_NOMEM, "out of memory");
	for (unsigned i = 1; i < s->ndirs; i++) {
		size_t n = strlen(s->pack_dirs[i]) - strlen("/" PACK_DIR);
		memcpy(o, s->pack_dirs[i], n);
		o += n;
		*o++ = '\n';
	}
	rc = io_write_atomic(s->path, DATADIRS_FILE, out, (size_t)(o - out), NULL);
	free(out);
	return rc;
}

int store_init(struct ckpt_store *s, const char *path, const ckpt_options *opts)
{
	pthread_mutex_init(&s->mu, NULL);
	pthread_mutex_init(&s->idx_mu, NULL);
	pthread_mutex_init(&s->pin_mu, NULL);
	s->lock_fd = -1;
	s->io = ckpt_io_default();
	index_init(&s->idx);
	if (!path || !*path)
		return ckpt_fail(CKPT_E_INVAL, "store path is empty");
	ckpt_options *defaults = NULL;
	if (!opts)
		opts = defaults = ckpt_options_create();
	if (!opts)
		return ckpt_fail(CKPT_E_NOMEM, "out of memory");
	s->opt = *opts;
	/* The options' strings stay the caller's; the store keeps its own copies (setup_dirs). */
	s->opt.ndata_dirs = 0;
	memset(s->opt.data_dirs, 0, sizeof s->opt.data_dirs);
	int rc = 0;
	s->path = strdup(path);
	char *hp = NULL;
	if (!s->path || !(s->pack_dir = join(path, PACK_DIR)) || !(s->mf_dir = join(path, MF_DIR)) ||
	    !(hp = join(path, STORE_FILE))) {
		rc = ckpt_fail(CKPT_E_NOMEM, "out of memory");
		goto out;
	}

	struct stat st;
	if (stat(hp, &st)) {
		int e = errno;
		if (e != ENOENT) {
			rc = ckpt_fail(ckpt_errno_code(e), "%s: %s", hp, strerror(e));
			goto out;
		}
		if (!s->opt.create || s->opt.read_only) {
			if (stat(path, &st))
				rc = ckpt_fail(CKPT_E_NOTFOUND, "store %s does not exist", path);
			else
				rc = ckpt_fail(CKPT_E_NOTFOUND, "%s is not a libckpt store (no %s file)",
					       path, STORE_FILE);
			goto out;
		}
		/* Not empty because another opener has just created the store there: open it. */
		if (!stat(path, &st) && !dir_is_empty(path) && stat(hp, &st)) {
			rc = ckpt_fail(CKPT_E_INVAL,
				       "%s is not empty and not a libckpt store; refusing to create one there",
				       path);
			goto out;
		}
		if ((rc = create_layout(s)))
			goto out;
	}
	if ((rc = refuse_symlink(s->pack_dir)) || (rc = refuse_symlink(s->mf_dir)))
		goto out;
	uint8_t *buf;
	size_t len;
	if ((rc = io_slurp(hp, 4096, &buf, &len)))
		goto out;
	rc = store_hdr_decode(buf, len, &s->hdr, hp);
	free(buf);
	if (rc || (rc = setup_dirs(s, opts)))
		goto out;
	for (unsigned i = 1; i < s->ndirs; i++)
		if ((rc = refuse_symlink(s->pack_dirs[i])))
			goto out;
	/* The one check of the mount: where it says flocks are node-local, the caller is told. */
	s->warning = store_mount_check("/proc/self/mountinfo", path);
out:
	free(hp);
	ckpt_options_free(defaults);
	return rc;
}

void store_fini(struct ckpt_store *s)
{
	store_tier_detach(s); /* first: its uploads read the store's paths */
	store_unlock(s);
	marker_end(s); /* a multi-rank save's, left by a handle closed with it in flight */
	free(s->warning);
	for (unsigned i = 0; s->pack_dirs && i < s->ndirs; i++)
		free(s->pack_dirs[i]);
	free(s->pack_dirs);
	for (unsigned i = 0; i < s->npinned; i++)
		s->pinned_free(s->pinned[i].p, s->pinned[i].size);
	s->npinned = 0;
	pthread_mutex_destroy(&s->pin_mu);
	pthread_mutex_destroy(&s->mu);
	pthread_mutex_destroy(&s->idx_mu);
	index_free(&s->idx);
	free(s->idx_seen);
	free(s->path);
	free(s->pack_dir);
	free(s->mf_dir);
}

int store_pinned_take(struct ckpt_store *s, size_t size, void **p, size_t *got)
{
	int found = 0;
	pthread_mutex_lock(&s->pin_mu);
	for (unsigned i = 0; i < s->npinned && !found; i++) {
		if (s->pinned[i].size < size)
			continue;
		*p = s->pinned[i].p;
		*got = s->pinned[i].size;
		s->pinned[i] = s->pinned[--s->npinned];
		found = 1;
	}
	pthread_mutex_unlock(&s->pin_mu);
	return found;
}

void store_pinned_give(struct ckpt_store *s, void *p, size_t size,
		       void (*free_fn)(void *p, size_t size))
{
	pthread_mutex_lock(&s->pin_mu);
	bool kept = s->npinned < STORE_PINNED_MAX;
	if (kept) {
		s->pinned[s->npinned++] = (struct store_pinned){p, size};
		s->pinned_free = free_fn;
	}
	pthread_mutex_unlock(&s->pin_mu);
	if (!kept)
		free_fn(p, size);
}

CKPT_API const char *ckpt_store_path(const ckpt_store *s)
{
	return s ? s->path : NULL;
}

CKPT_API const char *ckpt_store_warning(const ckpt_store *s)
{
	return s ? s->warning : NULL;
}

/* "checkpoint 25 not found in store S (steps: 10, 20)": the steps there are, the first and last
 * few of them, so that a mistyped step is easy to correct. */
static int missing_step(struct ckpt_store *s, uint64_t step)
{
	uint64_t *v = NULL;
	long n = store_steps(s, &v);
	char have[200] = "";
	for (long k = 0; k < n; k++) {
		char one[32];
		if (n > 10 && k == 5) {
			strncat(have, ", ...", sizeof have - strlen(have) - 1);
			k = n - 5;
		}
		snprintf(one, sizeof one, "%s%llu", k ? ", " : "", (unsigned long long)v[k]);
		strncat(have, one, sizeof have - strlen(have) - 1);
	}
	free(v);
	if (n < 0)
		return ckpt_fail(CKPT_E_NOTFOUND, "checkpoint %llu not found in store %s",
				 (unsigned long long)step, s->path);
	return ckpt_fail(CKPT_E_NOTFOUND, "checkpoint %llu not found in store %s (%s%s)",
			 (unsigned long long)step, s->path, n > 0 ? "steps: " : "it has none",
			 have);
}

int store_load_manifest(struct ckpt_store *s, uint64_t step, struct manifest *m)
{
	char name[64], p[4096];
	store_mf_name(step, name, sizeof name);
	snprintf(p, sizeof p, "%s/%s", s->mf_dir, name);
	uint8_t *buf;
	size_t len;
	int rc = io_slurp(p, MF_MAX_LEN, &buf, &len);
	if (rc == -CKPT_E_NOTFOUND)
		return missing_step(s, step);
	if (rc)
		return rc;
	rc = manifest_decode(buf, len, m, p);
	if (rc)
		return rc;
	if (m->step != step) {
		manifest_free(m);
		return ckpt_fail(CKPT_E_CORRUPT, "%s: holds step %llu, not %llu", p,
				 (unsigned long long)m->step, (unsigned long long)step);
	}
	if (memcmp(m->uuid, s->hdr.uuid, 16)) {
		manifest_free(m);
		return ckpt_fail(CKPT_E_CORRUPT, "%s: belongs to another store (uuid mismatch)", p);
	}
	return 0;
}

/* Parses "<20 digits>.ckpt"; temporary files start with '.' and never match. */
static int parse_mf_name(const char *n, uint64_t *step)
{
	if (strlen(n) != 25 || strcmp(n + 20, ".ckpt"))
		return -1;
	uint64_t v = 0;
	for (int i = 0; i < 20; i++) {
		if (n[i] < '0' || n[i] > '9')
			return -1;
		if (__builtin_mul_overflow(v, 10, &v) || __builtin_add_overflow(v, (uint64_t)(n[i] - '0'), &v))
			return -1;
	}
	*step = v;
	return 0;
}

static int cmp_u64(const void *a, const void *b)
{
	uint64_t x = *(const uint64_t *)a, y = *(const uint64_t *)b;
	return x < y ? -1 : x > y;
}

long store_steps(struct ckpt_store *s, uint64_t **steps)
{
	DIR *d = opendir(s->mf_dir);
	if (!d) {
		int e = errno;
		return ckpt_fail(ckpt_errno_code(e), "open %s: %s", s->mf_dir, strerror(e));
	}
	size_t n = 0, cap = 64;
	uint64_t *v = malloc(cap * sizeof *v);
	struct dirent *e;
	while (v && (e = readdir(d))) {
		uint64_t st;
		if (parse_mf_name(e->d_name, &st))
			continue;
		if (n == cap) {
			uint64_t *nv = realloc(v, (cap *= 2) * sizeof *v);
			if (!nv) {
				free(v);
				v = NULL;
				break;
			}
			v = nv;
		}
		v[n++] = st;
	}
	closedir(d);
	if (!v)
		return ckpt_fail(CKPT_E_NOMEM, "listing %s: out of memory", s->mf_dir);
	qsort(v, n, sizeof *v, cmp_u64);
	*steps = v;
	return (long)n;
}

void store_info_of(const struct manifest *m, ckpt_info *info)
{
	memset(info, 0, sizeof *info);
	info->step = m->step;
	info->time = m->time_ns / 1000000000;
	info->tensors = m->n_tensors;
	for (uint32_t i = 0; i < m->n_tensors; i++)
		info->logical_bytes += m->tensors[i].nbytes;
	info->new_bytes = m->new_bytes;
	info->tags = manifest_tags(m);
	info->chunks = m->n_chunks;
	for (uint32_t i = 0; i < m->n_chunks; i++) {
		info->stored_bytes += rec_span(m->chunks[i].stored_len);
		if (m->chunks[i].flags & MF_CHUNK_NEW)
			info->new_chunks++;
	}
}

/* Moves the array v[0..n] (tags[k] each entry's tags, malloc'd, NULL: none) into one block that
 * holds the strings after the entries, so that ckpt_info_free() is one free(). Frees v and tags
 * in every case; returns the block, or NULL when out of memory. */
static ckpt_info *info_pack(ckpt_info *v, char **tags, long n)
{
	size_t head = ((size_t)n + 1) * sizeof *v, pool = 1;
	for (long k = 0; k < n; k++)
		pool += tags[k] ? strlen(tags[k]) + 1 : 0;
	ckpt_info *out = malloc(head + pool);
	if (out) {
		memcpy(out, v, head);
		char *p = (char *)out + head;
		*p = 0;
		const char *none = p++;
		for (long k = 0; k <= n; k++) {
			out[k].struct_size = sizeof *out;
			out[k].tags = none;
			if (k == n || !tags[k])
				continue;
			out[k].tags = strcpy(p, tags[k]);
			p += strlen(p) + 1;
		}
	}
	for (long k = 0; k < n; k++)
		free(tags[k]);
	free(tags);
	free(v);
	return out;
}

static int load_local(void *arg, uint64_t step, struct manifest *m)
{
	return store_load_manifest(arg, step, m);
}

int store_info_list(const uint64_t *steps, long n, int include_invalid,
		    int (*load)(void *arg, uint64_t step, struct manifest *m), void *arg,
		    ckpt_info **out)
{
	*out = NULL;
	ckpt_info *v = calloc((size_t)n + 1, sizeof *v);
	char **tags = calloc((size_t)n + 1, sizeof *tags);
	long k = 0;
	int rc = v && tags ? 0 : ckpt_fail(CKPT_E_NOMEM, "out of memory");
	for (long i = 0; !rc && i < n; i++) {
		struct manifest m;
		rc = load(arg, steps[i], &m);
		if (rc && rc != -CKPT_E_NOMEM) {
			if (include_invalid) {
				v[k].step = steps[i];
				v[k++].error = -rc;
			}
			rc = 0;
			continue;
		}
		if (rc)
			break;
		store_info_of(&m, &v[k]);
		if (*v[k].tags && !(tags[k] = strdup(v[k].tags)))
			rc = ckpt_fail(CKPT_E_NOMEM, "out of memory");
		k++;
		manifest_free(&m);
	}
	if (rc) {
		for (long j = 0; tags && j < k; j++)
			free(tags[j]);
		free(tags);
		free(v);
		return rc;
	}
	if (!(*out = info_pack(v, tags, k)))
		return ckpt_fail(CKPT_E_NOMEM, "out of memory");
	return (int)k;
}

CKPT_API long ckpt_store_list(ckpt_store *s, int include_invalid, ckpt_info **out)
{
	*out = NULL;
	uint64_t *steps;
	long n = store_steps(s, &steps);
	if (n < 0)
		return (int)n;
	int rc = store_info_list(steps, n, include_invalid, load_local, s, out);
	free(steps);
	return rc;
}

CKPT_API void ckpt_info_free(ckpt_info *list)
{
	free(list);
}

CKPT_API int ckpt_store_resolve(ckpt_store *s, uint64_t step, uint64_t *out)
{
	if (step != CKPT_STEP_LATEST) {
		struct manifest m;
		int rc = store_load_manifest(s, step, &m);
		if (rc)
			return rc;
		manifest_free(&m);
		*out = step;
		return 0;
	}
	uint64_t *steps;
	long n = store_steps(s, &steps);
	if (n < 0)
		return (int)n;
	/* "latest" is the newest checkpoint that verifies, computed, never a pointer file. */
	for (long i = n - 1; i >= 0; i--) {
		struct manifest m;
		if (store_load_manifest(s, steps[i], &m) == 0) {
			manifest_free(&m);
			*out = steps[i];
			free(steps);
			return 0;
		}
	}
	free(steps);
	return ckpt_fail(CKPT_E_NOTFOUND, "store %s has no valid checkpoint", s->path);
}

struct ckpt_index *store_index_lock(struct ckpt_store *s)
{
	pthread_mutex_lock(&s->idx_mu);
	return &s->idx;
}

void store_index_unlock(struct ckpt_store *s)
{
	pthread_mutex_unlock(&s->idx_mu);
}

uint32_t store_new_pack_id(struct ckpt_store *s)
{
	return __atomic_add_fetch(&s->next_pack_id, 1, __ATOMIC_SEQ_CST);
}

bool store_direct_io(const struct ckpt_store *s)
{
	return s->opt.direct_io && !__atomic_load_n(&s->direct_refused, __ATOMIC_RELAXED);
}

void store_refuse_direct(struct ckpt_store *s)
{
	__atomic_store_n(&s->direct_refused, true, __ATOMIC_RELAXED);
}

/* Whether pack id names a file in any pack directory (an id names one pack across all of
 * them); a stat that fails otherwise than ENOENT counts as taken, so that the id is skipped. */
static bool pack_taken(const struct ckpt_store *s, uint32_t id)
{
	for (unsigned d = 0; d < s->ndirs; d++) {
		char p[4096];
		struct stat st;
		store_pack_path(s, d, id, p, sizeof p);
		if (lstat(p, &st) == 0 || errno != ENOENT)
			return true;
	}
	return false;
}

/* The last id of the run of taken ids that follows from (from itself taken, or the start of the
 * range), below hi: a galloping probe then a bisection, O(log run) stats. Ids are taken in
 * ascending order from the range's start, so the run ends at the writer's highest pack, unless
 * gc removed a pack in the middle: the probe may then stop in that hole. The ids there are free
 * (no manifest, no index entry names a removed pack), and create_pack's O_EXCL and its skip of
 * a taken run (store_skip_taken_ids) keep every later id unique. */
static uint32_t probe_taken(const struct ckpt_store *s, uint32_t from, uint32_t hi)
{
	uint32_t a = from, b = hi; /* a: from or taken; b: free or hi */
	for (uint32_t step = 1; hi - a > step; step *= 2) {
		if (!pack_taken(s, a + step)) {
			b = a + step;
			break;
		}
		a += step;
	}
	while (b - a > 1) {
		uint32_t m = a + (b - a) / 2;
		if (pack_taken(s, m))
			a = m;
		else
			b = m;
	}
	return a;
}

int store_max_pack_id(struct ckpt_store *s, uint32_t *out)
{
	/* Each writer allocates in its own id range (store.h, DIST_PACK_LO). */
	uint64_t lo = s->part_mode ? DIST_PACK_LO(s->part_rank) : 0;
	uint64_t hi = s->part_mode ? DIST_PACK_LO(s->part_rank + 1) : DIST_PACK_LO(0);
	/* Never below an id gc removed (or a remote holds): packids.c. */
	uint32_t mark;
	int rc = store_packid_mark(s->path, (uint32_t)(lo >> STORE_PACK_RANGE_BITS), &mark);
	if (rc)
		return rc;
	if (s->part_mode) {
		/* Every rank of every save: listing the shared directories (all ranks' packs) would
		 * cost each rank O(packs of the store) per save; probing the rank's own range from
		 * this handle's last id (its previous save's, when it was this rank's) or the mark
		 * costs a few stats. */
		uint32_t last = __atomic_load_n(&s->next_pack_id, __ATOMIC_SEQ_CST);
		uint32_t from = last >= lo && last < hi ? last : (uint32_t)lo;
		*out = probe_taken(s, MAX(from, mark), (uint32_t)hi);
		return 0;
	}
	uint32_t mx = mark;
	for (unsigned i = 0; i < s->ndirs; i++) {
		DIR *d = opendir(s->pack_dirs[i]);
		if (!d) {
			int e = errno;
			return ckpt_fail(ckpt_errno_code(e), "open %s: %s", s->pack_dirs[i], strerror(e));
		}
		struct dirent *e;
		while ((e = readdir(d))) {
			char *end;
			unsigned long v = strtoul(e->d_name, &end, 10);
			if (end != e->d_name && !strcmp(end, ".pack") && v > mx && v <= UINT32_MAX &&
			    v < hi)
				mx = (uint32_t)v;
		}
		closedir(d);
	}
	*out = mx;
	return 0;
}

void store_skip_taken_ids(struct ckpt_store *s)
{
	uint32_t lo = DIST_PACK_LO(s->part_rank), hi = DIST_PACK_LO(s->part_rank + 1);
	uint32_t cur = __atomic_load_n(&s->next_pack_id, __ATOMIC_SEQ_CST);
	if (!s->part_mode || cur < lo || cur >= hi)
		return;
	uint32_t last = probe_taken(s, cur, hi);
	while (cur < last && !__atomic_compare_exchange_n(&s->next_pack_id, &cur, last, false,
							  __ATOMIC_SEQ_CST, __ATOMIC_SEQ_CST))
		;
}

/* store_refresh_index() and store_index_resync(): index_sync.c. */
