/* The store of a handle: open and close, which init and fini its parts (store.h), and the
 * manifest files: loading, listing, resolving a step. */
#include "store/store.h"

#include <dirent.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>

#include "common/common.h"
#include "store/marker.h"

int store_init(struct ckpt_store *s, const char *path, const ckpt_options *opts)
{
	store_lock_init(&s->lock);
	store_pins_init(&s->pins);
	store_packs_init(&s->packs);
	store_index_init(&s->index);
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
	if (!s->path)
		rc = ckpt_fail(CKPT_E_NOMEM, "out of memory");
	else
		rc = store_layout_init(&s->layout, path, opts, &s->hdr);
	/* The one check of the mount: where it says flocks are node-local, the caller is told. */
	if (!rc)
		s->lock.warning = store_mount_check("/proc/self/mountinfo", path);
	ckpt_options_free(defaults);
	return rc;
}

void store_fini(struct ckpt_store *s)
{
	store_hooks_fini(&s->hooks); /* first: a remote's uploads read the store's paths */
	store_unlock(s);
	marker_end(s); /* a multi-rank save's, left by a handle closed with it in flight */
	store_lock_fini(&s->lock);
	store_layout_fini(&s->layout);
	store_pins_fini(&s->pins);
	store_index_fini(&s->index);
	free(s->path);
}

CKPT_API const char *ckpt_store_path(const ckpt_store *s)
{
	return s ? s->path : NULL;
}

CKPT_API const char *ckpt_store_warning(const ckpt_store *s)
{
	return s ? s->lock.warning : NULL;
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
	snprintf(p, sizeof p, "%s/%s", s->layout.mf_dir, name);
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
	DIR *d = opendir(s->layout.mf_dir);
	if (!d) {
		int e = errno;
		return ckpt_fail(ckpt_errno_code(e), "open %s: %s", s->layout.mf_dir, strerror(e));
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
		return ckpt_fail(CKPT_E_NOMEM, "listing %s: out of memory", s->layout.mf_dir);
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

/* store_refresh_index() and store_index_resync(): index_sync.c. */
