/* Forging manifest files for tests that damage checkpoints consistently: a manifest is decoded,
 * edited in memory and re-encoded through lib/format, so that its checksum follows and only the
 * edit is wrong. Used by tests/unit/dist/t-dist-storm.c, tests/unit/dist/t-dist-bounds.c and
 * tests/cli/mfset.c. */
#ifndef T_MF_REWRITE_H
#define T_MF_REWRITE_H

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "format/format.h"
#include "helpers.h"
#include "io/io.h"

/* Re-encodes manifest file path after edit(m) (the checksum follows); returns its new size and
 * writes its trailer (the last 16 bytes) into trailer (may be NULL). */
static size_t t_mf_rewrite(const char *path, void (*edit)(struct manifest *, void *), void *arg,
			   uint8_t *trailer)
{
	uint8_t *buf;
	size_t len;
	struct manifest m;
	REQUIRE(io_slurp(path, MF_MAX_LEN, &buf, &len) == 0 && manifest_decode(buf, len, &m, path) == 0);
	edit(&m, arg);
	uint64_t n = manifest_encoded_len(&m);
	uint8_t *out = malloc(n);
	REQUIRE(out);
	manifest_encode(&m, out);
	FILE *f = fopen(path, "wb");
	REQUIRE(f && fwrite(out, 1, n, f) == n && fclose(f) == 0);
	if (trailer)
		memcpy(trailer, out + n - 16, 16);
	free(out);
	manifest_free(&m);
	return (size_t)n;
}

struct t_mf_meta_edit {
	const char *key, *value;
};

static void t_mf_edit_meta(struct manifest *m, void *arg)
{
	const struct t_mf_meta_edit *e = arg;
	int found = 0;
	for (uint32_t i = 0; i < m->n_meta; i++)
		if (!strcmp(m->meta[i].key, e->key)) {
			m->meta[i].value = e->value;
			m->meta[i].vlen = (uint32_t)strlen(e->value);
			found = 1;
		}
	REQUIRE(found);
}

/* Sets metadata key of manifest file path to value (the key must be there). Inline: not every
 * includer uses it. */
static inline void t_mf_set_meta(const char *path, const char *key, const char *value)
{
	struct t_mf_meta_edit e = {key, value};
	t_mf_rewrite(path, t_mf_edit_meta, &e, NULL);
}

static void t_mf_drop_meta(struct manifest *m, void *arg)
{
	const char *key = arg;
	uint32_t k = 0;
	for (uint32_t i = 0; i < m->n_meta; i++)
		if (strcmp(m->meta[i].key, key))
			m->meta[k++] = m->meta[i];
	REQUIRE(k < m->n_meta);
	m->n_meta = k;
}

/* Removes metadata key (which must be there) from manifest file path. */
static inline void t_mf_del_meta(const char *path, const char *key)
{
	t_mf_rewrite(path, t_mf_drop_meta, (void *)key, NULL);
}

#endif
