/* What keeps a push and a remote gc, or two writers of one store id, from silently undoing each
 * other (tier.h): the gc markers a gc holds while it deletes, the push's wait for them, and the
 * writer records that name who pushes to a store id.
 *
 * Why a gc marker: a remote has no lock, and its deletes take minutes (one request a pack on S3).
 * A gc looks for upload markers before it deletes; a push that begins after that look can find
 * present a pack the gc is about to delete, and put a manifest naming it. So each side writes its
 * own marker first and then looks for the other's: with the remote's read-after-write listings,
 * at least one of them sees the other. A gc that sees a push spares every pack (tier_gc); a push
 * that sees a gc waits for it to end, then checks its packs again and sends what went. The gc
 * re-puts its marker every TIER_GC_REFRESH_S and looks for new upload markers each time, so a
 * marker that stops changing for TIER_GC_STALE_S is a dead gc's. */
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "common/common.h"
#include "common/hash.h"
#include "tier/tier.h"

#ifdef CKPT_TEST_HOOKS
void (*tier_test_hook)(const char *point);
#endif

int64_t tier_gc_stale_s(void)
{
	const char *e = getenv("CKPT_REMOTE_GC_STALE_S");
	long v = e ? atol(e) : 0;
	return v > 0 ? v : TIER_GC_STALE_S;
}

/* ---- gc markers -------------------------------------------------------------------------- */

static int put_gc_mark(const struct tier_ref *t, const char *key, unsigned round)
{
	char host[96], rec[256];
	store_host(host, sizeof host);
	int n = snprintf(rec, sizeof rec, "pid %d\nhost %s\nsince %lld\nround %u\n", (int)getpid(),
			 host, (long long)time(NULL), round);
	struct rmt_src src = {.buf = rec, .len = (uint64_t)n};
	return t->r->ops->put(t->r, key, &src, 0, NULL, NULL);
}

int tier_gc_mark(const struct tier_ref *t, struct tier_gc_mark *g)
{
	snprintf(g->key, sizeof g->key, TIER_ROOT "/%s/gc/%016llx.gc", t->id,
		 (unsigned long long)ckpt_random64());
	g->round = 0;
	g->lapsed = false;
	g->at = ckpt_now();
	return put_gc_mark(t, g->key, g->round);
}

bool tier_gc_due(const struct tier_gc_mark *g)
{
	double every = (double)tier_gc_stale_s() / (TIER_GC_STALE_S / TIER_GC_REFRESH_S);
	return ckpt_now() - g->at >= every;
}

int tier_gc_refresh(const struct tier_ref *t, struct tier_gc_mark *g)
{
	double now = ckpt_now();
	if (now - g->at > (double)tier_gc_stale_s() / 2)
		g->lapsed = true;
	int rc = put_gc_mark(t, g->key, ++g->round);
	if (!rc)
		g->at = now;
	return rc;
}

void tier_gc_unmark(const struct tier_ref *t, const struct tier_gc_mark *g)
{
	rmt_del_cleanup(t->r, g->key); /* one left behind is a dead gc's: pushes wait it out once */
}

/* ---- the push's side --------------------------------------------------------------------- */

struct seen {
	struct tier_gc_seen *g;
	double now;
	int err;
};

/* Takes one listed gc marker into the set: a new one, or a change (a refresh) of one known. */
static int on_gc_key(void *arg, const struct rmt_obj *o)
{
	struct seen *sn = arg;
	struct tier_gc_seen *g = sn->g;
	size_t i = 0;
	while (i < g->n && strcmp(g->m[i].key, o->key))
		i++;
	if (i == g->n) {
		if (g->n == ARRAY_SIZE(g->m))
			return 0; /* more than that many gcs at once: the first ones decide */
		snprintf(g->m[g->n].key, sizeof g->m[0].key, "%s", o->key);
		g->m[g->n].changed = sn->now;
		g->m[g->n].mtime = o->mtime;
		g->m[g->n++].size = o->size;
	} else if (g->m[i].mtime != o->mtime || g->m[i].size != o->size) {
		g->m[i].changed = sn->now, g->m[i].mtime = o->mtime, g->m[i].size = o->size;
	}
	g->m[i].listed = true;
	return 0;
}

int tier_gc_look(const struct tier_ref *t, struct tier_gc_seen *g)
{
	char prefix[128];
	snprintf(prefix, sizeof prefix, TIER_ROOT "/%s/gc/", t->id);
	for (size_t i = 0; i < g->n; i++)
		g->m[i].listed = false;
	struct seen sn = {.g = g, .now = ckpt_now()};
	int rc = t->r->ops->list(t->r, prefix, on_gc_key, &sn);
	size_t k = 0; /* forget those gone */
	for (size_t i = 0; i < g->n; i++)
		if (g->m[i].listed)
			g->m[k++] = g->m[i];
	g->n = k;
	return rc;
}

/* Whether every gc seen has ended or died (unchanged for the stale age). */
static bool gcs_over(const struct tier_gc_seen *g)
{
	double stale = (double)tier_gc_stale_s(), now = ckpt_now();
	for (size_t i = 0; i < g->n; i++)
		if (now - g->m[i].changed < stale)
			return false;
	return true;
}

int tier_gc_wait(const struct tier_ref *t, struct tier_gc_seen *g, const bool *cancel)
{
#ifdef CKPT_TEST_HOOKS
	if (tier_test_hook)
		tier_test_hook("push-gc-wait");
#endif
	unsigned ms = 50;
	int rc = 0;
	while (!rc && g->n && !gcs_over(g)) {
		if (cancel && __atomic_load_n(cancel, __ATOMIC_ACQUIRE))
			return ckpt_fail(CKPT_E_CANCELED, "push canceled while a remote gc of store "
					 "%s ran", t->id);
		struct timespec ts = {ms / 1000, (ms % 1000) * 1000000L};
		nanosleep(&ts, NULL);
		ms = ms < 1000 ? ms * 2 : 1000;
		rc = tier_gc_look(t, g);
	}
	return rc;
}

/* ---- writer records ------------------------------------------------------------------------ */

/* The record's key: one per host and store path, so that a store's pushes replace their own. */
static void writer_key(const struct tier_ref *t, const char *host, const char *path, char *key,
		       size_t len)
{
	char both[4200];
	int n = snprintf(both, sizeof both, "%s\n%s", host, path);
	uint64_t h = ckpt_checksum64(both, (size_t)(n < (int)sizeof both ? n : (int)sizeof both - 1));
	snprintf(key, len, TIER_ROOT "/%s/writers/%016" PRIx64 ".writer", t->id, h);
}

int tier_note_writer(struct ckpt_store *s, const struct tier_ref *t)
{
	char host[96], key[256], rec[4400];
	char *abs = realpath(s->path, NULL); /* the same store, whatever the working directory */
	const char *path = abs ? abs : s->path;
	store_host(host, sizeof host);
	writer_key(t, host, path, key, sizeof key);
	int n = snprintf(rec, sizeof rec, "host %s\npath %s\npid %d\nsince %lld\n", host, path,
			 (int)getpid(), (long long)time(NULL));
	free(abs);
	struct rmt_src src = {.buf = rec, .len = (uint64_t)(n < (int)sizeof rec ? n : (int)sizeof rec)};
	return t->r->ops->put(t->r, key, &src, 0, NULL, NULL);
}

struct wlist {
	char keys[8][160];
	size_t n, more;
};

static int on_writer(void *arg, const struct rmt_obj *o)
{
	struct wlist *w = arg;
	if (w->n < ARRAY_SIZE(w->keys))
		snprintf(w->keys[w->n++], sizeof w->keys[0], "%s", o->key);
	else
		w->more++;
	return 0;
}

/* "host H path P (last push T)" of one record, into out. */
static void describe_one(const struct tier_ref *t, const char *key, char *out, size_t len)
{
	uint8_t *b;
	uint64_t bl;
	char host[96] = "?", path[4096] = "?";
	long long since = 0;
	if (!tier_get_all(t, key, 8192, &b, &bl)) {
		char *txt = strndup((const char *)b, (size_t)bl);
		for (char *line = txt ? strtok(txt, "\n") : NULL; line; line = strtok(NULL, "\n")) {
			if (!strncmp(line, "host ", 5))
				snprintf(host, sizeof host, "%s", line + 5);
			else if (!strncmp(line, "path ", 5))
				snprintf(path, sizeof path, "%s", line + 5);
			else if (!strncmp(line, "since ", 6))
				since = atoll(line + 6);
		}
		free(txt);
		free(b);
	}
	char when[32] = "?";
	time_t tt = (time_t)since;
	struct tm tm;
	if (since && gmtime_r(&tt, &tm))
		strftime(when, sizeof when, "%Y-%m-%dT%H:%M:%SZ", &tm);
	snprintf(out, len, "%s:%s (last push %s)", host, path, when);
}

void tier_describe_writers(const struct tier_ref *t, char *out, size_t len)
{
	char prefix[128];
	snprintf(prefix, sizeof prefix, TIER_ROOT "/%s/writers/", t->id);
	struct wlist w = {0};
	*out = 0;
	if (t->r->ops->list(t->r, prefix, on_writer, &w) || !w.n) {
		snprintf(out, len, "none recorded");
		return;
	}
	size_t o = 0;
	for (size_t i = 0; i < w.n && o < len; i++) {
		char one[4300];
		describe_one(t, w.keys[i], one, sizeof one);
		o += (size_t)snprintf(out + o, len - o, "%s%s", i ? ", " : "", one);
	}
	if (w.more && o < len)
		snprintf(out + o, len - o, " and %zu more", w.more);
}
