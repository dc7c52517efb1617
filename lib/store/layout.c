/* The store's layout on disk: create/open of a store directory, its header, the pack
 * directories (the store's own packs/ and the data directories of STORE/datadirs), the names of
 * packs and manifests and the multi-rank part files. */
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

void store_pack_path(const struct ckpt_store *s, unsigned dir, uint32_t pack_id, char *buf, size_t len)
{
	snprintf(buf, len, "%s/%08u.pack", s->layout.pack_dirs[dir < s->layout.ndirs ? dir : 0],
		 pack_id);
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
	snprintf(name, sizeof name, "%u.part", s->lock.part_rank);
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
static int create_layout(struct store_layout *l, const char *path, const ckpt_options *opts)
{
	int rc;
	if ((rc = make_dir_durable(path)) || (rc = make_dir_durable(l->pack_dir)) ||
	    (rc = make_dir_durable(l->mf_dir)))
		return rc;
	struct store_hdr h = {
		.version = CKPT_FORMAT_VERSION,
		.chunk_size = opts->chunk_size ? (uint32_t)opts->chunk_size : (1u << 20),
		.codec = opts->compress > 0 ? CKPT_COMPRESS_ZSTD : CKPT_COMPRESS_NONE,
		.zstd_level = (uint8_t)(opts->zstd_level ? opts->zstd_level : 1),
		.created = ckpt_wall_ns() / 1000000000,
	};
	random_uuid(h.uuid);
	uint8_t buf[STORE_HDR_LEN];
	store_hdr_encode(&h, buf);
	if ((rc = io_fsync_dir(l->pack_dir)) || (rc = io_fsync_dir(l->mf_dir)))
		return rc;
	/* Ranks may create the same store at once: the first header wins, the others read it. */
	rc = io_write_new(path, STORE_FILE, buf, sizeof buf, NULL);
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

static int add_pack_dir(struct store_layout *l, const char *data_dir)
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
	for (unsigned i = 1; i < l->ndirs; i++)
		if (!strcmp(l->pack_dirs[i], data_dir))
			return 0;
	char *p = malloc(strlen(data_dir) + sizeof "/" PACK_DIR);
	if (!p)
		return ckpt_fail(CKPT_E_NOMEM, "out of memory");
	sprintf(p, "%s/%s", data_dir, PACK_DIR);
	for (unsigned i = 0; i < l->ndirs; i++)
		if (!strcmp(l->pack_dirs[i], p)) {
			free(p);
			return 0;
		}
	l->pack_dirs[l->ndirs++] = p;
	return 1;
}

/* Pack directories: the store's own, those recorded in STORE/datadirs, and those the options name
 * (recorded on the way, so that readers find packs without being told). */
static int setup_dirs(struct store_layout *l, const char *path, const ckpt_options *opts)
{
	l->pack_dirs = calloc(MAX_DATA_DIRS + 1, sizeof *l->pack_dirs);
	if (!l->pack_dirs || !(l->pack_dirs[0] = strdup(l->pack_dir)))
		return ckpt_fail(CKPT_E_NOMEM, "out of memory");
	l->ndirs = 1;
	char fp[4096];
	snprintf(fp, sizeof fp, "%s/%s", path, DATADIRS_FILE);
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
			if (l->ndirs > MAX_DATA_DIRS) {
				free(copy);
				return ckpt_fail(CKPT_E_CORRUPT, "%s: more than %d data directories", fp,
						 MAX_DATA_DIRS);
			}
			if ((rc = add_pack_dir(l, line)) < 0) {
				free(copy);
				return rc;
			}
		}
		free(copy);
		recorded = l->ndirs;
	}
	bool changed = false;
	for (unsigned i = 0; opts && i < opts->ndata_dirs; i++) {
		if (l->ndirs > MAX_DATA_DIRS)
			return ckpt_fail(CKPT_E_INVAL, "more than %d data directories", MAX_DATA_DIRS);
		if ((rc = add_pack_dir(l, opts->data_dirs[i])) < 0)
			return rc;
		changed |= rc == 1;
	}
	if (!changed || opts->read_only)
		return 0;
	for (unsigned i = recorded ? recorded : 1; i < l->ndirs; i++) {
		char *d = strdup(l->pack_dirs[i]);
		if (!d)
			return ckpt_fail(CKPT_E_NOMEM, "out of memory");
		char *slash = strrchr(d, '/');
		*slash = 0;
		rc = make_dir_durable(d);
		free(d);
		if (rc || (rc = make_dir_durable(l->pack_dirs[i])))
			return rc;
	}
	size_t cap = 1;
	for (unsigned i = 1; i < l->ndirs; i++)
		cap += strlen(l->pack_dirs[i]) + 1;
	char *out = malloc(cap), *o = out;
	if (!out)
		return ckpt_fail(CKPT_E_NOMEM, "out of memory");
	for (unsigned i = 1; i < l->ndirs; i++) {
		size_t n = strlen(l->pack_dirs[i]) - strlen("/" PACK_DIR);
		memcpy(o, l->pack_dirs[i], n);
		o += n;
		*o++ = '\n';
	}
	rc = io_write_atomic(path, DATADIRS_FILE, out, (size_t)(o - out), NULL);
	free(out);
	return rc;
}

int store_layout_init(struct store_layout *l, const char *path, const ckpt_options *opts,
		      struct store_hdr *hdr)
{
	int rc = 0;
	char *hp = NULL;
	if (!(l->pack_dir = join(path, PACK_DIR)) || !(l->mf_dir = join(path, MF_DIR)) ||
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
		if (!opts->create || opts->read_only) {
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
		if ((rc = create_layout(l, path, opts)))
			goto out;
	}
	if ((rc = refuse_symlink(l->pack_dir)) || (rc = refuse_symlink(l->mf_dir)))
		goto out;
	uint8_t *buf;
	size_t len;
	if ((rc = io_slurp(hp, 4096, &buf, &len)))
		goto out;
	rc = store_hdr_decode(buf, len, hdr, hp);
	free(buf);
	if (rc || (rc = setup_dirs(l, path, opts)))
		goto out;
	for (unsigned i = 1; i < l->ndirs; i++)
		if ((rc = refuse_symlink(l->pack_dirs[i])))
			goto out;
out:
	free(hp);
	return rc;
}

void store_layout_fini(struct store_layout *l)
{
	for (unsigned i = 0; l->pack_dirs && i < l->ndirs; i++)
		free(l->pack_dirs[i]);
	free(l->pack_dirs);
	free(l->pack_dir);
	free(l->mf_dir);
}
