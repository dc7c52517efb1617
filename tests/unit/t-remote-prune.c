/* Remote prune with every local retention rule: eight checkpoints whose manifests
 * record chosen commit times (CKPT_TEST_COMMIT_TIME, as the local calendar-rule tests) and tags,
 * all pushed; for each policy (calendar rules across months and a year boundary, keep_within
 * against a set clock, tags, keep_last, keep_every) the remote prune's dry run removes exactly
 * the steps the local prune's dry run removes, and those are the expected ones (the same as
 * tests/cli/t-ckptctl-prune.sh finds locally); a real remote prune leaves those steps on the
 * remote, collects their packs there, and leaves the local store alone. Bad policies are refused.
 * The remote is $CKPT_TEST_REMOTE (t-remote.h) or a temporary directory. */
#include <inttypes.h>
#include <stdbool.h>
#include <time.h>

#include "t-remote.h"

enum { TBYTES = 128 << 10, NSTEP = 8 };

/* 2024-11-15 (tagged best), 2024-12-10 (release), 2024-12-20, 2025-01-05 (release), 2025-01-25,
 * 2025-03-03, 2025-06-01 10:00 and 12:00, all UTC. */
static const struct { int y, mo, d, h; const char *tag; } when[NSTEP] = {
	{2024, 11, 15, 0, "best"}, {2024, 12, 10, 0, "release"}, {2024, 12, 20, 0, NULL},
	{2025, 1, 5, 0, "release"}, {2025, 1, 25, 0, NULL}, {2025, 3, 3, 0, NULL},
	{2025, 6, 1, 10, NULL}, {2025, 6, 1, 12, NULL},
};

static int64_t utc(int y, int mo, int d, int h)
{
	struct tm tm = {.tm_year = y - 1900, .tm_mon = mo - 1, .tm_mday = d, .tm_hour = h};
	return (int64_t)timegm(&tm);
}

static void save_all(ckpt_store *s)
{
	uint8_t *buf = malloc(TBYTES);
	uint64_t shape[1] = {TBYTES};
	for (int i = 0; i < NSTEP; i++) {
		char t[32];
		snprintf(t, sizeof t, "%lld", (long long)utc(when[i].y, when[i].mo, when[i].d, when[i].h));
		setenv("CKPT_TEST_COMMIT_TIME", t, 1);
		t_fill(buf, TBYTES, 100 + (uint64_t)i);
		save1 *sv;
		REQUIRE(save1_begin(s, (uint64_t)i + 1, &sv) == 0);
		CHECK_OK(save1_add_tensor(sv, "w", CKPT_DTYPE_U8, 1, shape, CKPT_MEM_HOST, buf));
		if (when[i].tag)
			CHECK_OK(save1_add_tag(sv, when[i].tag));
		REQUIRE(save1_commit(sv, NULL) == 0);
		CHECK_OK(rstore_push(s, (uint64_t)i + 1, NULL, NULL, NULL));
	}
	unsetenv("CKPT_TEST_COMMIT_TIME");
	free(buf);
}

/* The steps kept, "1 3 8", from the removed ones. */
static void kept_text(const uint64_t *removed, size_t n, char *buf, size_t len)
{
	size_t l = 0;
	buf[0] = 0;
	for (uint64_t step = 1; step <= NSTEP; step++) {
		bool gone = false;
		for (size_t i = 0; i < n; i++)
			gone |= removed[i] == step;
		if (!gone)
			l += (size_t)snprintf(buf + l, len - l, "%s%" PRIu64, l ? " " : "", step);
	}
}

/* The remote's dry run removes what the local one does, and keeps want. */
static void same_choice(ckpt_store *s, const char *name, const retain_rules *r, const char *want)
{
	gc_report *loc = NULL;
	rgc_report rep;
	uint64_t *removed = NULL;
	char lk[64], rk[64];
	CHECK_OK(retain_prune_gc(s, r, NULL, CKPT_GC_DRY_RUN, &loc));
	CHECK_OK(rstore_prune_gc(s, r, CKPT_GC_DRY_RUN, &rep, &removed));
	if (!loc)
		return;
	kept_text(loc->steps_removed, loc->n_steps_removed, lk, sizeof lk);
	kept_text(removed, rep.manifests_removed, rk, sizeof rk);
	printf("%-16s local keeps %-12s remote keeps %-12s (want %s)\n", name, lk, rk, want);
	CHECK(!strcmp(lk, want));
	CHECK(!strcmp(rk, want));
	CHECK(rep.packs_removed == 0); /* a dry run */
	gc_report_free(loc);
	free(removed);
}

static void remote_steps_are(ckpt_store *s, const char *want)
{
	uint64_t *v;
	long n = rstore_steps(s, &v);
	char buf[64] = "";
	size_t l = 0;
	for (long i = 0; i < n; i++)
		l += (size_t)snprintf(buf + l, sizeof buf - l, "%s%" PRIu64, l ? " " : "", v[i]);
	free(v);
	printf("remote holds %s (want %s)\n", buf, want);
	CHECK(!strcmp(buf, want));
}

int main(void)
{
	char *cleanup, *url = t_remote_url("remote-prune", &cleanup);
	char *dir = t_tmpdir("remote-prune-local");
	ckpt_store *s = t_open_store(dir, 0, 0);
	REQUIRE(rstore_set(s, url, 0) == 0);
	save_all(s);
	const char *release[] = {"release"}, *both[] = {"release", "best"};
	struct { const char *name; retain_rules r; const char *want; } cases[] = {
		{"monthly 3", {.keep_monthly = 3}, "5 6 8"},
		{"monthly 10", {.keep_monthly = 10}, "1 3 5 6 8"},
		{"yearly 2", {.keep_yearly = 2}, "3 8"},
		{"yearly 3", {.keep_yearly = 3}, "1 3 8"},
		{"monthly+yearly", {.keep_monthly = 2, .keep_yearly = 2}, "1 3 6 8"},
		{"weekly+daily+mo", {.keep_weekly = 1, .keep_daily = 2, .keep_monthly = 2},
		 "1 3 5 6 8"},
		{"hourly 2", {.keep_hourly = 2}, "7 8"},
		{"last+tag", {.keep = {.keep_last = 1}, .keep_tags = release, .n_keep_tags = 1},
		 "2 4 8"},
		{"last+tags", {.keep = {.keep_last = 1}, .keep_tags = both, .n_keep_tags = 2},
		 "1 2 4 8"},
		{"within 100d", {.keep_within = 100 * 86400, .now = utc(2025, 6, 2, 0)}, "6 7 8"},
		{"every 4", {.keep = {.keep_last = 1, .keep_every = 4}}, "4 8"},
	};
	for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++)
		same_choice(s, cases[i].name, &cases[i].r, cases[i].want);

	/* Refused: a negative duration, a bad tag, no policy. */
	rgc_report rep;
	const char *bad[] = {"a,b"};
	CHECK(rstore_prune_gc(s, &(retain_rules){.keep_within = -1}, 0, &rep, NULL) ==
	      -CKPT_E_INVAL);
	CHECK(rstore_prune_gc(s, &(retain_rules){.keep_tags = bad, .n_keep_tags = 1},
					 0, &rep, NULL) == -CKPT_E_INVAL);
	CHECK(rstore_prune_gc(s, NULL, 0, &rep, NULL) == -CKPT_E_INVAL);

	/* The real thing: the remote keeps 5 6 8 and collects the others' packs; local untouched. */
	uint64_t *removed = NULL;
	CHECK_OK(rstore_prune_gc(s, &(retain_rules){.keep_monthly = 3}, 0, &rep,
					    &removed));
	printf("removed %" PRIu64 " checkpoints and %" PRIu64 " packs from the remote\n",
	       rep.manifests_removed, rep.packs_removed);
	CHECK(rep.manifests_removed == 5 && rep.packs_removed == 5);
	CHECK(removed && removed[0] == 1 && removed[4] == 7);
	free(removed);
	remote_steps_are(s, "5 6 8");
	ckpt_info *list;
	CHECK(ckpt_store_list(s, 0, &list) == NSTEP);
	ckpt_info_free(list);
	ckpt_store_close(s);
	return t_remote_done(dir, cleanup, url);
}
