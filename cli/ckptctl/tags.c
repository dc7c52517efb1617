/* Tags in ckptctl: the options that take one (import --tag, list --tag, prune --keep-tag) and how
 * list and show print a checkpoint's (ckpt_info.tags, joined by ','). */
#include "ckptctl.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

int ck_tag_option(const char *cmd, const char *opt, const char *arg, const char ***tags, size_t *n)
{
	if (ckpt_tag_check(arg))
		return cli_usage_err(cmd, "%s: %s", opt, ckpt_errmsg());
	const char **nt = realloc(*tags, (*n + 1) * sizeof **tags);
	if (!nt) {
		cli_err("%s: out of memory", cmd);
		return EXIT_FAIL;
	}
	*tags = nt;
	nt[(*n)++] = arg;
	return 0;
}

size_t tags_in(const char *list)
{
	size_t n = *list != 0;
	for (const char *p = list; *p; p++)
		n += *p == ',';
	return n;
}

bool ck_tags_any(const char *list, const char *const *want, size_t n)
{
	for (const char *p = list; *p;) {
		size_t len = strcspn(p, ",");
		for (size_t k = 0; k < n; k++)
			if (strlen(want[k]) == len && !memcmp(want[k], p, len))
				return true;
		p += len + (p[len] == ',');
	}
	return false;
}

void ck_tags_json(struct jw *w, const char *list)
{
	jw_key(w, "tags");
	jw_arr_begin(w);
	for (const char *p = list; *p;) {
		size_t len = strcspn(p, ",");
		char t[CKPT_TAG_MAX + 1];
		snprintf(t, sizeof t, "%.*s", (int)len, p);
		jw_str(w, t);
		p += len + (p[len] == ',');
	}
	jw_arr_end(w);
}

/* The fields of a ckpt_info that list and show --json both print, in that order, tags last. */
void ck_json_aliases(struct jw *w, uint64_t bytes_new, uint64_t chunks_new, int64_t chunks_reused)
{
	jw_key(w, "new_bytes"); jw_u64(w, bytes_new);
	jw_key(w, "new_chunks"); jw_u64(w, chunks_new);
	if (chunks_reused >= 0) {
		jw_key(w, "reused_chunks"); jw_u64(w, (uint64_t)chunks_reused);
	}
}

void ck_info_json(struct jw *w, const ckpt_info *i)
{
	jw_key(w, "step"); jw_u64(w, i->step);
	jw_key(w, "time"); jw_i64(w, i->time);
	jw_key(w, "tensors"); jw_u64(w, i->tensors);
	jw_key(w, "logical_bytes"); jw_u64(w, i->logical_bytes);
	jw_key(w, "bytes_new"); jw_u64(w, i->new_bytes);
	jw_key(w, "stored_bytes"); jw_u64(w, i->stored_bytes);
	jw_key(w, "chunks"); jw_u64(w, i->chunks);
	jw_key(w, "chunks_new"); jw_u64(w, i->new_chunks);
	ck_json_aliases(w, i->new_bytes, i->new_chunks, -1);
	ck_tags_json(w, i->tags);
}
