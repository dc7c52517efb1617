/* The stores of a remote, for a node that has none yet: each store's info object (who pushed to
 * it: host and path) and what a listing of the remote says of it (checkpoints, newest step, pack
 * bytes). docs/format.md, "Remote layout". */
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/common.h"
#include "tier/tier.h"

#define INFO_MAX 8192 /* an info object is two short lines; anything larger is not one */

void tier_key_info(const struct tier_ref *t, char *buf, size_t len)
{
	snprintf(buf, len, TIER_ROOT "/%s/info", t->id);
}

/* s's info text into buf: "host H\npath P\n", the path absolute when it resolves; a newline in
 * it would end its line, so it becomes '?'. */
static void info_text(struct ckpt_store *s, char *buf, size_t len)
{
	char host[256], abs[PATH_MAX];
	store_host(host, sizeof host);
	const char *path = realpath(s->path, abs) ? abs : s->path;
	snprintf(buf, len, "host %s\npath %s", host, path);
	for (char *c = buf + strlen("host ") + strlen(host) + 1; *c; c++)
		if (*c == '\n' || *c == '\r')
			*c = '?';
	strncat(buf, "\n", len - strlen(buf) - 1);
}

int tier_put_info(struct ckpt_store *s, const struct tier_ref *t)
{
	char key[256], text[PATH_MAX + 512];
	tier_key_info(t, key, sizeof key);
	info_text(s, text, sizeof text);
	uint8_t *cur;
	uint64_t len;
	/* Put only when it changed: most pushes come from the store that pushed last. */
	if (!tier_get_all(t, key, INFO_MAX, &cur, &len)) {
		bool same = len == strlen(text) && !memcmp(cur, text, len);
		free(cur);
		if (same)
			return 0;
	}
	struct rmt_src src = {.buf = text, .len = strlen(text)};
	return t->r->ops->put(t->r, key, &src, 0, NULL, NULL);
}

/* What a listing of the remote gathers, per store id. */
struct sum {
	struct sum_one {
		char id[TIER_ID_LEN + 1];
		bool hdr;
		uint64_t checkpoints, newest, bytes;
		char *host, *path;
	} *v;
	size_t n, cap;
};

static struct sum_one *sum_of(struct sum *s, const char *id)
{
	for (size_t i = 0; i < s->n; i++)
		if (!memcmp(s->v[i].id, id, TIER_ID_LEN))
			return &s->v[i];
	if (ckpt_grow((void **)&s->v, &s->cap, s->n + 1, sizeof *s->v))
		return NULL;
	struct sum_one *o = &s->v[s->n++];
	memset(o, 0, sizeof *o);
	memcpy(o->id, id, TIER_ID_LEN);
	o->newest = CKPT_STEP_LATEST;
	return o;
}

/* Sorts one key of the remote (TIER_ROOT/ID/...) into its store's counts. */
static int on_obj(void *arg, const struct rmt_obj *o)
{
	const char *id = o->key + strlen(TIER_ROOT "/"), *rel = id + TIER_ID_LEN + 1;
	uint8_t u[16];
	char buf[TIER_ID_LEN + 1], tail[8];
	unsigned long long step;
	unsigned pack;
	if (strlen(id) <= TIER_ID_LEN + 1 || id[TIER_ID_LEN] != '/')
		return 0;
	snprintf(buf, sizeof buf, "%.*s", TIER_ID_LEN, id);
	if (tier_parse_id(buf, u)) /* not a store's key: not ours to count */
		return 0;
	struct sum_one *s = sum_of(arg, buf);
	if (!s)
		return -CKPT_E_NOMEM;
	if (!strcmp(rel, "store")) {
		s->hdr = true;
	} else if (strlen(rel) == 35 && sscanf(rel, "manifests/%20llu.ckp%1[t]", &step, tail) == 2) {
		s->checkpoints++;
		if (s->newest == CKPT_STEP_LATEST || step > s->newest)
			s->newest = step;
	} else if (strlen(rel) == 19 && sscanf(rel, "packs/%8u.pac%1[k]", &pack, tail) == 2) {
		s->bytes += o->size;
	}
	return 0;
}

/* Reads store o's info object into o->host and o->path (malloc'd; left NULL when there is none
 * or it says nothing). Only a failure to reach the remote is an error. */
static int read_info(struct rmt *r, struct sum_one *o)
{
	struct tier_ref t = {.r = r};
	memcpy(t.id, o->id, sizeof t.id);
	char key[256];
	tier_key_info(&t, key, sizeof key);
	uint8_t *buf;
	uint64_t len;
	int rc = tier_get_all(&t, key, INFO_MAX, &buf, &len);
	if (rc)
		return rc == -CKPT_E_IO || rc == -CKPT_E_NOMEM ? rc : 0;
	char *text = realloc(buf, len + 1);
	if (!text) {
		free(buf);
		return -CKPT_E_NOMEM;
	}
	text[len] = 0;
	for (char *line = strtok(text, "\n"); line; line = strtok(NULL, "\n")) {
		char **to = !strncmp(line, "host ", 5) ? &o->host : !strncmp(line, "path ", 5) ? &o->path
											  : NULL;
		if (to && !*to && !(*to = strdup(line + 5))) {
			free(text);
			return -CKPT_E_NOMEM;
		}
	}
	free(text);
	return 0;
}

static int cmp_id(const void *a, const void *b)
{
	return strcmp(((const struct sum_one *)a)->id, ((const struct sum_one *)b)->id);
}

/* The stores of s with a header, as one malloc'd block: the entries, a zeroed one, then their
 * strings (so that ckpt_remote_stores_free() is one free()). */
static ckpt_remote_store *pack_list(const struct sum *s, size_t n)
{
	size_t head = (n + 1) * sizeof(ckpt_remote_store), pool = 1;
	for (size_t i = 0; i < s->n; i++)
		if (s->v[i].hdr)
			pool += (s->v[i].host ? strlen(s->v[i].host) + 1 : 0) +
				(s->v[i].path ? strlen(s->v[i].path) + 1 : 0);
	ckpt_remote_store *out = calloc(1, head + pool);
	if (!out)
		return NULL;
	char *p = (char *)out + head, *none = p++;
	size_t k = 0;
	for (size_t i = 0; i < s->n; i++) {
		const struct sum_one *o = &s->v[i];
		if (!o->hdr)
			continue;
		ckpt_remote_store *e = &out[k++];
		memcpy(e->id, o->id, sizeof e->id);
		e->host = e->path = none;
		e->checkpoints = o->checkpoints;
		e->newest_step = o->newest;
		e->bytes = o->bytes;
		if (o->host)
			e->host = strcpy(p, o->host), p += strlen(o->host) + 1;
		if (o->path)
			e->path = strcpy(p, o->path), p += strlen(o->path) + 1;
	}
	out[n].host = out[n].path = none;
	out[n].newest_step = CKPT_STEP_LATEST;
	return out;
}

long tier_remote_summary(struct rmt *r, ckpt_remote_store **out)
{
	struct sum s = {0};
	*out = NULL;
	long rc = r->ops->list(r, TIER_ROOT "/", on_obj, &s), n = 0;
	if (s.n)
		qsort(s.v, s.n, sizeof *s.v, cmp_id);
	for (size_t i = 0; !rc && i < s.n; i++)
		if (s.v[i].hdr && !(rc = read_info(r, &s.v[i])))
			n++;
	if (rc == -CKPT_E_NOMEM || (!rc && !(*out = pack_list(&s, (size_t)n))))
		rc = ckpt_fail(CKPT_E_NOMEM, "out of memory listing remote %s", r->url);
	for (size_t i = 0; i < s.n; i++) {
		free(s.v[i].host);
		free(s.v[i].path);
	}
	free(s.v);
	return rc ? rc : n;
}
